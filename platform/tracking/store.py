"""The MLflow store (docs/architecture.md): which one (``resolve_tracking_uri``), whether it can be
used at start (``check_reachable``), and a client for it (``client``): direct, or a
``relay.RelayClient`` where only the driver's node can reach it.  Explicit run ids everywhere, no
global MLflow state.  What an outage means to a writer is ``tracking.spool``'s alone."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from platform.errors import UserError
from platform.redaction import redact
from platform.tracking.health import server_down
from platform.tracking.relay import RelayClient, find_relay

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

# The environment an ``mlflow server`` for the platform runs in (ray_cluster.yaml's head, the
# tests' servers): no job runner.  MLflow 3 starts one by default, for its GenAI jobs, which the
# platform never submits: seven Huey consumer processes, about 20 CPU-seconds per server start.
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def default_tracking_uri() -> str:
    """``sqlite:///<cwd>/mlflow.db``: the store when neither a flag nor the environment names one."""
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def resolve_tracking_uri(flag: str | None = None) -> str:
    """``--tracking-uri``, else ``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the cwd;
    a local store made absolute (``absolute_store``); a store that cannot be reached is a
    one-line error here, before any work."""
    uri = absolute_store(flag or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri())
    check_reachable(uri)
    return uri


def absolute_store(uri: str) -> str:
    """A local store with its path made absolute against the driver's cwd, once, here.

    Every other process that opens it (the relay actor, rank 0, a trial driver) runs in Ray's
    copy of the repository, where ``sqlite:///mlflow.db`` would name another, empty store and
    every call would fail with "Run ... not found".  Remote stores (``http(s)://``,
    ``databricks``) pass unchanged; so does the in-memory ``sqlite://``.  MLflow's file store
    (``file:…`` or a bare directory) is refused with a one-line error: MLflow 3 keeps it in
    maintenance mode and refuses to open it unless ``MLFLOW_ALLOW_FILE_STORE`` is set."""
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///"):]
        return uri if path.startswith("/") else f"sqlite:///{Path(path).resolve()}"
    if uri.startswith("file:") or ("://" not in uri and ("/" in uri or "." in uri or uri == "mlruns")):
        raise UserError(f"tracking store {uri!r}: MLflow's file store is deprecated in MLflow 3 and not "
                        f"supported here; use sqlite:///mlflow.db (a local file) or a server's http:// URI")
    return uri


def client(tracking_uri: str) -> MlflowClient | RelayClient:
    """An MLflow client for ``tracking_uri``: a ``RelayClient`` if a relay runs for the store,
    else an ``MlflowClient``."""
    relay = find_relay(tracking_uri)
    if relay is not None:
        return RelayClient(relay)
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def on_client(mlflow_client, function: Callable[..., Any], *args, **kwargs) -> Any:
    """``function(mlflow_client, *args, **kwargs)`` where the client's calls run: in the relay
    actor for a ``RelayClient``, else here.

    For the calls on a trial's start-up path (find or create its run, read a tag, log metrics):
    ``function`` takes and returns plain data, so the trial process and the Train worker never
    unpickle an MLflow object, which would import MLflow there (seconds of CPU per process, twice
    per trial, on a machine where the other trial is training)."""
    if isinstance(mlflow_client, RelayClient):
        return mlflow_client.run(function, *args, **kwargs)
    return function(mlflow_client, *args, **kwargs)


def log_metrics(mlflow_client, run_id: str, metrics: dict[str, float], step: int, timestamp_ms: int) -> None:
    from mlflow.entities import Metric

    batch = [Metric(key, float(value), timestamp_ms, step) for key, value in metrics.items()]
    mlflow_client.log_batch(run_id, metrics=batch)


def run_tags(mlflow_client, run_id: str) -> dict[str, str]:
    return dict(mlflow_client.get_run(run_id).data.tags)


def run_status(mlflow_client, run_id: str) -> str:
    return mlflow_client.get_run(run_id).info.status


def metric_steps(mlflow_client, run_id: str, key: str) -> list[int]:
    return [int(metric.step) for metric in mlflow_client.get_metric_history(run_id, key)]


def model_steps(mlflow_client, run_id: str) -> list[int]:
    """The updates at which the run's logged models were linked to it."""
    outputs = mlflow_client.get_run(run_id).outputs
    return [int(output.step) for output in (outputs.model_outputs if outputs else [])]


def log_missing_metrics(mlflow_client, run_id: str, key: str, history: list[dict[str, float]],
                        timestamp_ms: int) -> list[int]:
    """Log each entry of ``history`` (step = its ``key``) whose step the run's ``key`` lacks;
    returns the steps logged.  One call, so it runs as one in the relay."""
    have = set(metric_steps(mlflow_client, run_id, key))
    missing = [metrics for metrics in history if int(metrics[key]) not in have]
    for metrics in missing:
        log_metrics(mlflow_client, run_id, metrics, int(metrics[key]), timestamp_ms)
    return [int(metrics[key]) for metrics in missing]


def terminate(mlflow_client, run_id: str, message: str | None, only_if_running: bool) -> None:
    """Close the run FINISHED, or FAILED with ``message`` as its ``error`` tag; with
    ``only_if_running`` a run that someone else closed already stays as it is."""
    if only_if_running and mlflow_client.get_run(run_id).info.status != "RUNNING":
        return
    if message is not None:
        mlflow_client.set_tag(run_id, "error", redact(message)[:5000])
        mlflow_client.set_terminated(run_id, status="FAILED")
    else:
        mlflow_client.set_terminated(run_id, status="FINISHED")


def check_reachable(tracking_uri: str, timeout: float = 5.0) -> None:
    """Fail fast with one line when the store cannot be used, before any training starts."""
    if tracking_uri.startswith(("http://", "https://")):
        if (reason := server_down(tracking_uri, timeout)) is not None:
            raise UserError(f"cannot reach the MLflow tracking server at {tracking_uri} ({reason}); start it "
                            f"(mlflow server --host 127.0.0.1 ...) or pass another --tracking-uri")
    elif tracking_uri.startswith("sqlite:///"):
        directory = Path(tracking_uri[len("sqlite:///"):]).parent
        if not directory.is_dir():
            raise UserError(f"the directory of the MLflow database {tracking_uri} does not exist: {directory}")
        if not os.access(directory, os.W_OK):
            raise UserError(f"cannot write the MLflow database {tracking_uri}: {directory} is not writable")
