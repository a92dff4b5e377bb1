"""Which MLflow store a command uses, and what rank 0 does when its run is not in it."""


import pytest

from platform.tracking import runs
from platform.tracking.logger import RunLogger, RunLost
from platform.tracking.store import absolute_store, resolve_tracking_uri


def test_local_stores_are_made_absolute_against_the_drivers_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_store("sqlite:///heldout.db") == f"sqlite:///{tmp_path}/heldout.db"
    assert absolute_store("sqlite:///sub/../m.db") == f"sqlite:///{tmp_path}/m.db"
    assert absolute_store("file:mlruns") == (tmp_path / "mlruns").as_uri()
    assert absolute_store("file:./mlruns") == (tmp_path / "mlruns").as_uri()
    assert absolute_store("mlruns") == (tmp_path / "mlruns").as_uri()
    for unchanged in ("sqlite:////srv/m.db", "file:///srv/mlruns", "http://127.0.0.1:5000", "databricks"):
        expected = unchanged if "://" in unchanged else (tmp_path / unchanged).as_uri()
        assert absolute_store(unchanged) == expected
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///env.db")  # the environment's relative form too
    assert resolve_tracking_uri() == f"sqlite:///{tmp_path}/env.db"


def test_rank_0_stops_when_its_run_is_not_in_the_store(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    runs.start_run(uri, "lost", "exists", {"a": "1"}, {}, "a: 1\n")  # the store exists, the run below does not
    logger = RunLogger(uri, "0" * 32)  # its first call (reopen the run) is refused
    assert not logger.drain(30)
    with pytest.raises(RunLost, match="does not exist"):  # training would otherwise go on, logging nothing
        logger.metrics({"dev_bleu": 1.0}, step=1)
