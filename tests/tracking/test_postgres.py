"""The tracking database on a real PostgreSQL server (Debian's package, started by the test
set-up), as ``ray_cluster.yaml``'s head runs it.  Its backup here; runs, a nested sweep and a
killed driver's resume on an MLflow server backed by it in ``tests/launch/test_faults.py``
(the median+cmaes case), the outage path in ``tests/test_reliability.py``."""

from __future__ import annotations

import subprocess


def test_a_backup_of_the_tracking_database_restores_every_run_and_only_the_newest_are_kept(postgres, tmp_path):
    from helpers import run_module
    from mlflow.tracking import MlflowClient

    database = postgres.database("backed_up")
    client = MlflowClient(database)
    run = client.create_run(client.create_experiment("kept"))
    client.log_metric(run.info.run_id, "dev_bleu", 31.5, step=3)
    client.set_terminated(run.info.run_id)
    for _ in range(3):
        made = run_module("platform.backup", "--database", database, "--to", str(tmp_path / "backups"), "--keep", "2")
        assert made.returncode == 0, made.stderr
    kept = sorted(p.name for p in (tmp_path / "backups").iterdir())
    assert len(kept) == 2 and all(name.startswith("mlflow-") and name.endswith(".dump") for name in kept)
    restored = postgres.database("restored")
    done = subprocess.run([str(postgres.bin / "pg_restore"), "--no-owner", f"--dbname={restored}",
                           str(tmp_path / "backups" / kept[-1])], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    again = MlflowClient(restored).get_run(run.info.run_id)
    assert again.info.status == "FINISHED" and again.data.metrics["dev_bleu"] == 31.5
    refused = run_module("platform.backup", "--database", f"sqlite:///{tmp_path}/mlflow.db",
                         "--to", str(tmp_path / "b2"))
    assert refused.returncode == 2 and "only a PostgreSQL database can be backed up" in refused.stderr
    assert not (tmp_path / "b2").exists()  # nothing written
