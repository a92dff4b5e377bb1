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
    other = postgres.database("backed")  # a database whose name begins the first's: its backups apart
    for _ in range(3):
        made = run_module("platform.backup", "--database", database, "--database", other,
                          "--to", str(tmp_path / "backups"), "--keep", "2")
        assert made.returncode == 0, made.stderr
    names = sorted(p.name for p in (tmp_path / "backups").iterdir())
    kept = [name for name in names if name.startswith("backed_up-")]
    assert len(kept) == 2 and all(name.endswith(".dump") for name in kept)
    assert len([name for name in names if name.startswith("backed-")]) == 2 and len(names) == 4
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


def test_the_clusters_study_storage_serves_its_dashboard_on_loopback(postgres, tmp_path):
    """``ray_cluster.yaml``'s ``NMT_STUDY_STORAGE``: a database of its own on the tracking server,
    where a sweep's study lives (the head-restarted sweep of tests/launch/test_autoscaling.py resumes
    from it); the head's ``optuna-dashboard`` command serves it on 127.0.0.1 for the forwarded port."""
    import json
    import os
    import signal
    import sys
    import urllib.request
    from pathlib import Path

    import optuna
    from helpers import free_port, require_module, wait_for

    require_module("optuna_dashboard", "optuna-dashboard (the dev extra) serves the cluster's studies")
    storage = postgres.database("optuna")
    study = optuna.create_study(study_name="dbsa-1", storage=storage, direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={"p_enc": 2}, value=21.5,
                                              distributions={"p_enc": optuna.distributions.IntDistribution(0, 5)}))
    port = free_port()
    dashboard = Path(sys.executable).parent / "optuna-dashboard"
    log = open(tmp_path / "dashboard.log", "w")
    server = subprocess.Popen([str(dashboard), storage, "--host", "127.0.0.1", "--port", str(port)], stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def studies():
            assert server.poll() is None, (tmp_path / "dashboard.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as answer:
                    return json.loads(answer.read())["study_summaries"]
            except OSError:
                return None

        listed = wait_for(studies, 60, "optuna-dashboard")
        assert [entry["study_name"] for entry in listed] == ["dbsa-1"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()
