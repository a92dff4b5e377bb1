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


def test_artifacts_live_beside_the_database_whatever_the_creating_process_cwd(tmp_path, monkeypatch, capsys):
    """The relay and trials run in Ray's temporary copy of the repository: MLflow's default
    (./mlruns of the creating process) put every artifact there, to vanish with Ray's session."""
    elsewhere = tmp_path / "ray-copy"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    uri = f"sqlite:///{tmp_path}/store/mlflow.db"
    (tmp_path / "store").mkdir()
    run_id = runs.start_run(uri, "it's/odd", "r", {}, {}, "a: 1\n")  # config.yaml is an artifact
    logged = list((tmp_path / "store" / "mlruns").rglob("config.yaml"))
    assert len(logged) == 1 and run_id in str(logged[0])
    assert not (elsewhere / "mlruns").exists()
    # an experiment an older version made inside Ray's copy is named, not used silently
    from mlflow.tracking import MlflowClient

    in_ray_copy = f"/tmp/ray/session_x{runs.RAY_COPY}_ray_pkg_1/mlruns/2"
    MlflowClient(uri).create_experiment("old", artifact_location=in_ray_copy)
    runs.start_run(uri, "old", "r", {}, {}, "")
    assert "keeps its artifacts in Ray's temporary copy" in capsys.readouterr().err


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


def test_experiments_open_on_their_runs_in_mlflows_ui(tmp_path):
    """MLflow 3's UI reads ``mlflow.experimentKind``; without it an experiment opens on an empty
    GenAI overview.  New experiments get it, old ones on their next run; runs show their commit."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mlflow_client = MlflowClient(uri)
    old = mlflow_client.create_experiment("made-before")
    run_id = runs.start_run(uri, "made-before", "r", {"git_commit": "abc123"}, {}, "a: 1\n")
    runs.start_run(uri, "new", "r", {"git_commit": "unknown"}, {}, "a: 1\n")
    for name in ("made-before", "new"):
        assert mlflow_client.get_experiment_by_name(name).tags["mlflow.experimentKind"] == "custom_model_development"
    assert mlflow_client.get_experiment(old).experiment_id == old
    assert mlflow_client.get_run(run_id).data.tags["mlflow.source.git.commit"] == "abc123"


def test_a_runs_dataset_splits_are_its_mlflow_inputs(tmp_path, demo_dataset):
    """The runs table's Dataset column: train/dev/test of the prepared dataset, each with its
    own digest, Parquet file and size."""
    import json

    from mlflow.tracking import MlflowClient

    from platform.data import dataset as ds

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id = runs.start_run(uri, "inputs", "r", {}, {}, "a: 1\n")
    runs.log_dataset_inputs(uri, run_id, str(demo_dataset), ds.read_meta(demo_dataset))
    inputs = MlflowClient(uri).get_run(run_id).inputs.dataset_inputs
    contexts = {next(t.value for t in i.tags if t.key == "mlflow.data.context"): i.dataset for i in inputs}
    assert set(contexts) == {"train", "dev", "test"}
    assert len({d.digest for d in contexts.values()}) == 3
    assert {d.name for d in contexts.values()} == {demo_dataset.name}
    assert json.loads(contexts["dev"].source)["uri"] == f"{demo_dataset}/dev.parquet"
    assert contexts["dev"].source_type == "local"
    pairs = ds.read_meta(demo_dataset)["splits"]["train"]["pairs_written"]
    assert json.loads(contexts["train"].profile)["pairs"] == pairs


def test_a_read_from_a_hung_server_holds_training_ten_seconds_at_most():
    """A server that accepts connections and never answers (MLflow would wait minutes per try):
    a read holds the caller ``READ_WAIT_S`` (10 s), no longer.  The bound is watched on a logger
    whose own wait is 1 s, so the test does not sit out the 10 s."""
    import socket

    assert RunLogger.READ_WAIT_S == 10.0
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    try:
        logger = RunLogger(f"http://127.0.0.1:{hung.getsockname()[1]}", "0" * 32, reopen=False, keep_going=True)
        logger.READ_WAIT_S = 1.0
        assert logger.get_tag("diverged") is None  # taken as unset
        # the logger's own account of the wait, which rank 0 logs as tracking_wait_s
        assert logger.READ_WAIT_S - 0.5 <= logger.held_s < logger.READ_WAIT_S + 3
        assert logger.close() == []
    finally:
        hung.close()


def test_only_the_calls_of_the_thread_that_made_the_logger_count_as_held_time():
    """Rank 0's ``tracking_wait_s`` is the training thread's time in its logger; the system
    metrics sampler's calls, from its own thread, are not training held up."""
    import socket
    import threading

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    try:
        logger = RunLogger(f"http://127.0.0.1:{hung.getsockname()[1]}", "0" * 32, reopen=False, keep_going=True)
        logger.READ_WAIT_S = 1.0
        made = logger.held_s
        sampler = threading.Thread(target=logger.metric_steps, args=("system/cpu",))
        sampler.start()
        sampler.join()
        assert logger.held_s == made
        logger.get_tag("diverged")
        assert logger.held_s - made >= 0.9
        assert logger.close() == []
    finally:
        hung.close()


def test_the_relay_does_not_queue_one_trials_calls_behind_anothers_upload(ray_cluster, tmp_path):
    """Through the relay to a real server: while one run's 300 MB checkpoint upload is under way,
    another run's tag is written and answered (a single-threaded relay would answer it after)."""
    import time

    import ray
    from servers import MlflowServer

    from platform.tracking.relay import start_relay

    server = MlflowServer(tmp_path)
    server.start()
    try:
        uploading = runs.start_run(server.uri, "relay", "big", {"a": "1"}, {}, "a: 1\n")
        tagging = runs.start_run(server.uri, "relay", "small", {"a": "1"}, {}, "a: 1\n")
        relay = start_relay(server.uri)
        assert relay is not None
        upload = relay.log_artifact_bytes.remote(uploading, "checkpoint.pt", b"\0" * (300 << 20), "best")
        time.sleep(0.5)  # the upload has begun
        tag = relay.call.remote("set_tag", tagging, "note", "answered")
        ready, _ = ray.wait([upload, tag], num_returns=1, timeout=300)
        assert ready == [tag]  # the small call came back first
        ray.get([upload, tag], timeout=300)
        from mlflow.tracking import MlflowClient

        assert MlflowClient(server.uri).get_run(tagging).data.tags["note"] == "answered"
        assert [a.path for a in MlflowClient(server.uri).list_artifacts(uploading, "best")] == ["best/checkpoint.pt"]
    finally:
        server.stop()


# missed metrics chosen when sent, so a store down at the call gets none twice: in the tracking
# outage of tests/test_reliability.py::test_a_tracking_outage_never_holds_the_caller_and_loses_nothing
# (one real server's stop and restart for both)
