"""The tracking database on a real PostgreSQL server (Debian's package, started by the test
set-up), as ``ray_cluster.yaml``'s head runs it (the head itself, optuna-dashboard on its study
database included, in tests/test_ray_up.py).  Its backup here; runs, a nested sweep and a
killed driver's resume on an MLflow server backed by it in ``tests/launch/test_faults.py``
(the median+cmaes case), the outage path in ``tests/test_reliability.py``."""

from __future__ import annotations


def test_backups_skip_unchanged_dumps_keep_the_good_copy_through_a_replaced_head_and_restore_it(postgres, tmp_path,
                                                                                               capsys):
    """The head's backup loop against what a real cluster does to it: unchanged databases (not
    written again), changed ones (rotated), a replaced head whose new, empty database is dumped
    every hour (the last good copy stays), then the good copy restored into a new server's empty
    database and read through an MLflow server, as the MLflow UI reads it."""
    from helpers import run_in_process
    from mlflow.tracking import MlflowClient
    from servers import MlflowServer, PostgresServer

    from platform.backup import main

    def run_module(_, *args):  # the command as its __main__ runs it, in this process
        return run_in_process(main, args, capsys)

    database = postgres.database("backed_up")
    client = MlflowClient(database)
    run = client.create_run(client.create_experiment("kept"))
    other = postgres.database("backed")  # a database whose name begins the first's: its backups apart
    backups = tmp_path / "backups"

    def back_up(*urls: str, keep: int = 2) -> str:
        made = run_module("platform.backup", *[a for url in urls for a in ("--database", url)], "--to", backups,
                          "--keep", str(keep))
        assert made.returncode == 0, made.stderr
        return made.stderr

    def names(prefix: str) -> list[str]:
        return sorted(p.name for p in backups.iterdir() if p.name.startswith(prefix + "-"))

    for step in range(3):  # a change before each: three dumps, the newest two kept
        client.log_metric(run.info.run_id, "dev_bleu", 30.0 + step, step=step)
        back_up(database, other)
    client.set_terminated(run.info.run_id)
    good = back_up(database)
    assert len(names("backed_up")) == 2 and all(name.endswith(".dump") for name in names("backed_up"))
    assert "unchanged since" in back_up(database, other)  # nothing new: no dump written
    assert len(names("backed_up")) == 2 and len(names("backed")) == 1
    good = names("backed_up")[-1]

    replaced = PostgresServer()  # the head replaced: a new, empty tracking database of the same name
    replaced.start()
    try:
        empty = replaced.database("backed_up")
        MlflowClient(empty).search_experiments()  # the MLflow server's schema, no runs
        for _ in range(3):  # every hour, with --keep 1
            back_up(empty, keep=1)
        assert good in names("backed_up"), names("backed_up")  # the last full copy stays
        assert len(names("backed_up")) == 2

        refused = run_module("platform.backup", "--restore", "latest", "--from", backups, "--database", empty)
        assert refused.returncode == 2 and "not empty" in refused.stderr, refused.stderr
        target = replaced.database("mlflow")
        done = run_module("platform.backup", "--restore", backups / good, "--database", target)
        assert done.returncode == 0, done.stderr
        server = MlflowServer(tmp_path / "ui", backend=target)
        (tmp_path / "ui").mkdir()
        server.start()
        try:
            again = MlflowClient(server.uri).get_run(run.info.run_id)
            assert again.info.status == "FINISHED" and again.data.metrics["dev_bleu"] == 32.0
        finally:
            server.stop()
        latest = replaced.database("backed")
        done = run_module("platform.backup", "--restore", "latest", "--from", backups, "--database", latest)
        assert done.returncode == 0 and f"restored {backups / names('backed')[-1]}" in done.stderr, done.stderr
    finally:
        replaced.stop()
    refused = run_module("platform.backup", "--database", f"sqlite:///{tmp_path}/mlflow.db",
                         "--to", str(tmp_path / "b2"))
    assert refused.returncode == 2 and "only a PostgreSQL database can be backed up" in refused.stderr
    assert not (tmp_path / "b2").exists()  # nothing written


def test_rotation_keeps_the_newest_the_last_of_each_earlier_day_and_the_largest():
    from platform.data import storage
    from platform.tracking.backup import Backup, to_delete

    def made(day: int, hour: int, size: int) -> Backup:
        name = f"mlflow-202611{day:02d}T{hour:02d}0000000000Z-{day:02d}{hour:02d}aaaabbbb.dump"
        return Backup(storage.locate(f"/b/{name}"), name, size)

    full = [made(day, hour, 1000 + day * 24 + hour) for day in (1, 2, 3) for hour in (0, 12)]
    assert [b.name for b in to_delete(full, keep=2, keep_days=30)] == [full[0].name, full[2].name]
    assert full[0].digest == "0100aaaabbbb" and full[0].day == "20261101"
    # a replaced head: 48 hourly dumps of an empty database after the full ones, --keep 2
    empty = [made(4 + hour // 24, hour % 24, 10) for hour in range(48)]
    gone = {b.name for b in to_delete(full + empty, keep=2, keep_days=1)}
    assert full[-1].name not in gone  # the largest: the last full copy
    assert gone == {b.name for b in full[:-1] + empty[:23] + empty[24:46]}
    old = Backup(storage.locate("/b/mlflow-20261101T000000000000Z.dump"), "mlflow-20261101T000000000000Z.dump", 5)
    assert old.digest is None and old.day == "20261101"  # a backup named before digests were recorded
