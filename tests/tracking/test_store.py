"""Which MLflow store a command uses, and what rank 0 does when its run is not in it."""


import pytest

from platform.errors import UserError
from platform.tracking import runs
from platform.tracking.logger import RunLogger, RunLost
from platform.tracking.store import absolute_store, resolve_tracking_uri


def test_local_stores_are_made_absolute_against_the_drivers_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_store("sqlite:///heldout.db") == f"sqlite:///{tmp_path}/heldout.db"
    assert absolute_store("sqlite:///sub/../m.db") == f"sqlite:///{tmp_path}/m.db"
    for unchanged in ("sqlite:////srv/m.db", "sqlite://", "http://127.0.0.1:5000", "databricks"):
        assert absolute_store(unchanged) == unchanged
    for file_store in ("file:mlruns", "file:///srv/mlruns", "./mlruns", "mlruns", "/srv/mlruns"):
        with pytest.raises(UserError, match=r"file store is deprecated in MLflow 3 .* use sqlite:///mlflow.db"):
            absolute_store(file_store)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///env.db")  # the environment's relative form too
    assert resolve_tracking_uri() == f"sqlite:///{tmp_path}/env.db"


def test_rank_0_stops_when_its_run_is_not_in_the_store(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    runs.start_run(uri, "lost", "exists", {"a": "1"}, {}, "a: 1\n")  # the store exists, the run below does not
    logger = RunLogger(uri, "0" * 32)  # its first call (reopen the run) is refused
    assert not logger.drain(30)
    with pytest.raises(RunLost, match="is not an active run"):  # training would otherwise go on, logging nothing
        logger.metrics({"dev_bleu": 1.0}, step=1)


def test_rank_0_stops_when_its_run_is_deleted(tmp_path):
    """MLflow answers a write to a deleted run with INVALID_PARAMETER_VALUE, not "not found"."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id = runs.start_run(uri, "lost", "deleted", {"a": "1"}, {}, "a: 1\n")
    logger = RunLogger(uri, run_id)
    logger.metrics({"dev_bleu": 1.0}, step=1)
    assert logger.drain(30)
    runs.client(uri).delete_run(run_id)  # e.g. from the UI, while the run trains
    logger.metrics({"dev_bleu": 2.0}, step=2)
    assert not logger.drain(30)
    with pytest.raises(RunLost, match="is not an active run"):
        logger.metrics({"dev_bleu": 3.0}, step=3)
