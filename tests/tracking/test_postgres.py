"""The tracking that matters on a real PostgreSQL server (Debian's package, started by the test
set-up), as ``ray_cluster.yaml``'s head runs it: an MLflow server backed by a PostgreSQL
database.  Runs, a nested sweep and a killed driver's resume here; the outage path in
``tests/test_reliability.py`` (parametrized over both backends)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, MlflowServer, wait_for
from helpers import runs_of, sweep_args
from platform import tune

pytestmark = pytest.mark.slow


def test_a_sweep_killed_and_resumed_keeps_one_run_per_trial_in_postgresql(ray_cluster, demo_dataset, tmp_path, postgres):
    import sqlalchemy

    database = postgres.database("sweep_resume")
    (tmp_path / "mlflow").mkdir()
    server = MlflowServer(tmp_path / "mlflow", backend=database)
    server.start()
    try:
        args = sweep_args(demo_dataset, tmp_path, "--name", "pg1", "--num-trials", "2", "--max-epochs", "3",
                          "--max-concurrent", "2", "--scheduler", "none", "--set", "eval.max_sentences=8",
                          experiment="postgres")
        args[args.index("--tracking-uri") + 1] = server.uri
        log = open(tmp_path / "driver.log", "w")
        driver = subprocess.Popen([sys.executable, "-m", "platform.tune", *args, "--address",
                                   ray_cluster.get_runtime_context().gcs_address], cwd=ROOT, stdout=log,
                                  stderr=subprocess.STDOUT, env={**os.environ, "RAY_ADDRESS": ""}, start_new_session=True)

        def a_trial_has_reported():
            _, found = runs_of(server.uri, "postgres")
            return any("dev_bleu" in r.data.metrics for r in found if r.data.tags.get("mlflow.parentRunId"))

        try:
            wait_for(lambda: driver.poll() is None and a_trial_has_reported(), 300, "a trial's first epoch")
            wait_for(lambda: list((tmp_path / "runs" / "pg1").glob("experiment_state-*.json")), 60, "Tune's state")
        finally:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=60)
            log.close()
        assert tune.main(args + ["--resume"]) == 0, (tmp_path / "driver.log").read_text()[-3000:]
        client, found = runs_of(server.uri, "postgres")
    finally:
        server.stop()
    parents = [r for r in found if r.data.tags.get("sweep_parent") == "pg1"]
    trials = [r for r in found if r.data.tags.get("mlflow.parentRunId")]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(trials) == 2 and len({r.data.tags["trial_id"] for r in trials}) == 2  # none duplicated by the resume
    assert all(r.info.status == "FINISHED" and r.data.metrics.get("dev_bleu") is not None for r in trials)
    assert all(r.outputs.model_outputs for r in trials)  # each trial's MLflow model
    # and it is all in PostgreSQL, not in a file beside the server
    assert not (tmp_path / "mlflow" / "mlflow.db").exists()
    engine = sqlalchemy.create_engine(database)
    with engine.connect() as connection:
        count = connection.execute(sqlalchemy.text("select count(*) from runs")).scalar()
        epochs = connection.execute(sqlalchemy.text("select count(*) from metrics where key = 'dev_bleu'")).scalar()
    engine.dispose()
    assert count == 3 and epochs >= 6  # the parent and 2 trials; 3 epochs each


def test_a_backup_of_the_tracking_database_restores_every_run_and_only_the_newest_are_kept(postgres, tmp_path):
    from mlflow.tracking import MlflowClient

    from conftest import run_module

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
    refused = run_module("platform.backup", "--database", f"sqlite:///{tmp_path}/mlflow.db", "--to", str(tmp_path / "b2"))
    assert refused.returncode == 2 and "only a PostgreSQL database can be backed up" in refused.stderr
    assert not (tmp_path / "b2").exists()  # nothing written
