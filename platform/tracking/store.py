"""The MLflow store (docs/architecture.md): which one (``resolve_tracking_uri``), whether it answers,
and a client for it — direct, or through the relay actor where only the driver's node can
reach it.  Explicit run ids everywhere (``MlflowClient``), no global MLflow state."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from platform.errors import UserError
from platform.tracking.artifacts import files_of, is_direct, upload_bytes, upload_direct, upload_model_files


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


def client(tracking_uri: str):
    """An MLflow client for ``tracking_uri``: direct, or through the relay actor if one runs."""
    relay = _find_relay(tracking_uri)
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

    mlflow_client.log_batch(run_id, metrics=[Metric(key, float(value), timestamp_ms, step) for key, value in metrics.items()])


def run_tags(mlflow_client, run_id: str) -> dict[str, str]:
    return dict(mlflow_client.get_run(run_id).data.tags)


def run_status(mlflow_client, run_id: str) -> str:
    return mlflow_client.get_run(run_id).info.status


def metric_steps(mlflow_client, run_id: str, key: str) -> list[int]:
    return [int(metric.step) for metric in mlflow_client.get_metric_history(run_id, key)]


def log_missing_metrics(mlflow_client, run_id: str, key: str, history: list[dict[str, float]], timestamp_ms: int) -> list[int]:
    """Log each entry of ``history`` (step = its ``key``) whose step the run's ``key`` lacks;
    returns the steps logged.  One call, so it runs as one in the relay."""
    have = set(metric_steps(mlflow_client, run_id, key))
    missing = [metrics for metrics in history if int(metrics[key]) not in have]
    for metrics in missing:
        log_metrics(mlflow_client, run_id, metrics, int(metrics[key]), timestamp_ms)
    return [int(metrics[key]) for metrics in missing]


# ------------------------------------------------------------------------------ the relay
# A store only the driver's machine can reach — an sqlite file, or a server bound to
# 127.0.0.1 as on the ray_cluster.yaml head — is written through one Ray actor pinned to the
# driver's node.  Workers on other nodes (rank 0 of a trial, trial drivers) send it their calls;
# For a local file store the one actor also serialises the writes that sqlite would otherwise
# refuse under contention; for a server it runs RELAY_THREADS calls at once, so one trial's call
# caught in MLflow's retries during an outage does not hold up every other trial's calls.
RELAY_THREADS = 8


def needs_relay(tracking_uri: str) -> bool:
    uri = tracking_uri.lower()
    return (uri.startswith(("sqlite:", "file:")) or "://" not in uri
            or any(host in uri for host in ("://127.0.0.1", "://localhost", "://[::1]")))


def relay_name(tracking_uri: str) -> str:
    return "nmt-mlflow-relay-" + hashlib.sha256(tracking_uri.encode()).hexdigest()[:16]


def start_relay(tracking_uri: str):
    """Start (or find) the relay for ``tracking_uri`` on this node; needs Ray to be initialized."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not needs_relay(tracking_uri):
        return None
    here = ray.get_runtime_context().get_node_id()
    name = relay_name(tracking_uri)
    for attempt in range(5):
        try:
            threads = RELAY_THREADS if tracking_uri.lower().startswith(("http://", "https://")) else 1
            handle = ray.remote(num_cpus=0)(MlflowRelay).options(
                name=name, get_if_exists=True, max_concurrency=threads,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)).remote(tracking_uri)
        except ValueError:  # "Failed to look up actor": it was being torn down as we looked it up
            if attempt == 4:
                raise
            time.sleep(0.5)
            continue
        _HELD.setdefault(name, []).append(handle)
        return handle


# The relay handles this process started or found, every one of them.  A named actor that is
# not detached is torn down when its creator holds no handle any more: a dropped handle once
# killed the relay while a trial looked it up ("Failed to look up actor with name ..."), and a
# second CLI call in one process, which found the relay and replaced the creating handle with
# the found one, once killed it under its own next call (CI: "The actor is dead because all
# references to the actor were removed").
_HELD: dict[str, list] = {}


def release_relays() -> None:
    """Drop this process's relay handles (the relays it created then stop; tests call this after each test)."""
    _HELD.clear()


def _find_relay(tracking_uri: str):
    try:
        import ray

        if not ray.is_initialized() or not needs_relay(tracking_uri):
            return None
        return ray.get_actor(relay_name(tracking_uri))
    except (ImportError, ValueError):  # no Ray, or no relay started for this store
        return None


class MlflowRelay:
    """The actor: an MlflowClient on the driver's node."""

    def __init__(self, tracking_uri: str):
        import logging

        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # not "Creating initial MLflow database tables"
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.tracking_uri = tracking_uri
        self._guard, self._run_locks = threading.Lock(), {}
        self.carried = 0  # artifact bytes that crossed to this actor (none where the store is direct)

    def call(self, method: str, *args, **kwargs):
        """One MlflowClient call; calls about one run (its id first) run one at a time, in the
        order they came, so a reopen stuck in MLflow's retries cannot land after the end_run
        that followed it.  Other runs' calls go on in the actor's other threads."""
        with self._run_lock(_run_of(args, kwargs)):
            return getattr(self.client, method)(*args, **kwargs)

    def down(self) -> str | None:
        """``server_down``, asked from the driver's node."""
        return server_down(self.tracking_uri)

    def _run_lock(self, run_id: str | None):
        if run_id is None:
            return contextlib.nullcontext()
        with self._guard:
            return self._run_locks.setdefault(run_id, threading.Lock())

    def log_artifact_bytes(self, run_id: str, name: str, data: bytes, directory: str | None) -> None:
        with self._run_lock(run_id):
            upload_bytes(self.client, run_id, name, data, directory)
        with self._guard:
            self.carried += len(data)

    def log_model_files(self, model_id: str, files: dict[str, bytes]) -> None:
        upload_model_files(self.client, model_id, files)
        with self._guard:
            self.carried += sum(len(data) for data in files.values())

    def carried_bytes(self) -> int:
        """The artifact bytes relayed so far (a sweep logs it as ``relay_artifact_bytes``)."""
        return self.carried

    def run(self, function: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """``on_client`` here: ``function(client, *args, **kwargs)``, one run's calls in order
        (the run id first, as in ``call``)."""
        with self._run_lock(_run_of(args, kwargs)):
            return function(self.client, *args, **kwargs)


def _run_of(args: tuple, kwargs: dict) -> str | None:
    """Which run a relayed call is about: its ``run_id``, else its first argument if a string."""
    return kwargs.get("run_id") or (args[0] if args and isinstance(args[0], str) else None)


class RelayClient:
    """MlflowClient's methods, executed by the relay.  Artifact files go straight from this node
    to the artifact store where it is one every node writes to (S3 with the node's role: the
    relay only tells where), else they travel to the relay as bytes."""

    def __init__(self, actor):
        self.actor = actor
        self.locations: dict[str, str] = {}  # run or model id → its artifact location

    def log_artifact(self, run_id: str, local_path: str, artifact_path: str | None = None) -> None:
        import ray

        location = self._location(run_id, lambda: self.get_run(run_id).info.artifact_uri)
        if is_direct(location):
            return upload_direct(location, Path(local_path), artifact_path)
        data = Path(local_path).read_bytes()
        ray.get(self.actor.log_artifact_bytes.remote(run_id, Path(local_path).name, data, artifact_path))

    def log_model_artifacts(self, model_id: str, local_dir: str, artifact_path: str | None = None) -> None:
        import ray

        location = self._location(model_id, lambda: self.get_logged_model(model_id).artifact_location)
        if is_direct(location):
            return upload_direct(location, Path(local_dir), artifact_path)
        prefix = Path(artifact_path) if artifact_path else Path()
        files = {str(prefix / name): data for name, data in files_of(Path(local_dir)).items()}
        ray.get(self.actor.log_model_files.remote(model_id, files))

    def _location(self, key: str, ask) -> str:
        if key not in self.locations:
            self.locations[key] = ask()
        return self.locations[key]

    def down(self) -> str | None:
        import ray

        return ray.get(self.actor.down.remote())

    def run(self, function: Callable[..., Any], *args, **kwargs) -> Any:
        import ray

        return ray.get(self.actor.run.remote(function, args, kwargs))

    def __getattr__(self, method: str):
        import ray

        return lambda *args, **kwargs: ray.get(self.actor.call.remote(method, *args, **kwargs))


def relay_carried_bytes(tracking_uri: str) -> int | None:
    """The artifact bytes the relay of ``tracking_uri`` carried, or None where there is none."""
    relay = _find_relay(tracking_uri)
    if relay is None:
        return None
    import ray

    return int(ray.get(relay.carried_bytes.remote()))


def _unreachable(url: str, timeout: float) -> str | None:
    """Why nothing usable answers at ``url`` (None if something does)."""
    import ssl
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout):  # noqa: S310 - the user's own tracking server
            return None
    except urllib.error.HTTPError as error:  # a server answered: fine unless it is failing (5xx)
        return f"HTTP {error.code} {error.reason}" if error.code >= 500 else None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, ssl.SSLError):
            return None  # TLS settings are MLflow's business (MLFLOW_TRACKING_SERVER_CERT_PATH, ...)
        return str(reason)


def server_down(tracking_uri: str, timeout: float = 5.0) -> str | None:
    """Why an HTTP tracking server does not answer its health check (None: it does, or the store
    is not a server)."""
    if not tracking_uri.startswith(("http://", "https://")):
        return None
    return _unreachable(tracking_uri.rstrip("/") + "/health", timeout)


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
