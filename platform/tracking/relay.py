"""The MLflow relay: one Ray actor on the driver's node that makes the MLflow calls of every
process, for a store only that node can reach (an sqlite file, or a server bound to 127.0.0.1
as on the ray_cluster.yaml head).

Workers on other nodes (rank 0 of a trial, trial drivers) reach it through ``RelayClient``,
whose methods are the MlflowClient calls the platform makes.  For an sqlite store the one actor
also serialises the writes that sqlite would otherwise refuse under contention; for a server it
runs ``RELAY_THREADS`` calls at once, so one trial's call caught in MLflow's retries during an
outage does not hold up every other trial's calls.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from platform.tracking.artifacts import files_of, is_direct, upload_bytes, upload_direct, upload_model_files
from platform.tracking.health import server_down

if TYPE_CHECKING:
    from mlflow.entities import Experiment, FileInfo, LoggedModel, LoggedModelOutput, Metric, Run
    from mlflow.entities.model_registry import ModelVersion
    from mlflow.store.entities import PagedList

RELAY_THREADS = 8  # calls a relay to an HTTP server runs at once (one for an sqlite file)


def needs_relay(tracking_uri: str) -> bool:
    """Whether only the driver's node can reach the store: a local file, or a server on loopback."""
    uri = tracking_uri.lower()
    return (uri.startswith(("sqlite:", "file:")) or "://" not in uri
            or any(host in uri for host in ("://127.0.0.1", "://localhost", "://[::1]")))


def relay_name(tracking_uri: str) -> str:
    return "nmt-mlflow-relay-" + hashlib.sha256(tracking_uri.encode()).hexdigest()[:16]


def start_relay(tracking_uri: str):
    """Start (or find) the relay for ``tracking_uri`` on this node; needs Ray to be initialized.

    The caller holds the handle for as long as the relay must live (the command's run or
    sweep): Ray tears a named actor that is not detached down as soon as its creator holds no
    handle to it, and a handle found later does not keep it up."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not needs_relay(tracking_uri):
        return None
    here = ray.get_runtime_context().get_node_id()
    threads = RELAY_THREADS if tracking_uri.lower().startswith(("http://", "https://")) else 1
    for attempt in range(5):
        try:
            # max_restarts: Ray starts a relay whose process died again (on its node), so the
            # calls that follow reach it; one in flight fails, and the logger sends it again
            return ray.remote(num_cpus=0, max_restarts=-1)(MlflowRelay).options(
                name=relay_name(tracking_uri), get_if_exists=True, max_concurrency=threads,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)).remote(tracking_uri)
        except ValueError:  # "Failed to look up actor": it was being torn down as we looked it up
            if attempt == 4:
                raise
            time.sleep(0.5)
    return None


@contextlib.contextmanager
def held_relay(tracking_uri: str, wait_s: float = 30.0):
    """The relay of ``tracking_uri`` (``start_relay``) held for the block: a command's lifetime.
    The command that started it ends it at the block's end and waits (at most ``wait_s``) until
    Ray no longer finds it, so that a next command in the same process starts a new one rather
    than finding this one as it goes; a relay another command started is left to that one."""
    started = find_relay(tracking_uri) is None
    handle = start_relay(tracking_uri)
    try:
        yield handle
    finally:
        if started and handle is not None:
            _end(handle, relay_name(tracking_uri), wait_s)


def _end(handle, name: str, wait_s: float) -> None:
    import ray

    ray.kill(handle)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            ray.get_actor(name)
        except ValueError:  # gone
            return
        time.sleep(0.1)


def find_relay(tracking_uri: str):
    """The running relay of ``tracking_uri``, or None (no Ray, or no relay for this store)."""
    try:
        import ray

        if not ray.is_initialized() or not needs_relay(tracking_uri):
            return None
        return ray.get_actor(relay_name(tracking_uri))
    except (ImportError, ValueError):  # no Ray, or no relay started for this store
        return None


def relay_carried_bytes(tracking_uri: str) -> int | None:
    """The artifact bytes the relay of ``tracking_uri`` carried, or None where there is none."""
    relay = find_relay(tracking_uri)
    if relay is None:
        return None
    import ray

    return int(ray.get(relay.carried_bytes.remote()))


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
        """The MlflowClient method ``method`` (one of ``RelayClient``'s); calls about one run (its
        id first) run one at a time, in the order they came, so a reopen stuck in MLflow's
        retries cannot land after the end_run that followed it.  Other runs' calls go on in the
        actor's other threads."""
        with self._run_lock(_run_of(args, kwargs)):
            return getattr(self.client, method)(*args, **kwargs)

    def run(self, function: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """``store.on_client`` here: ``function(client, *args, **kwargs)``, one run's calls in
        order (the run id first, as in ``call``)."""
        with self._run_lock(_run_of(args, kwargs)):
            return function(self.client, *args, **kwargs)

    def down(self) -> str | None:
        """``health.server_down``, asked from the driver's node."""
        return server_down(self.tracking_uri)

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

    def _run_lock(self, run_id: str | None):
        if run_id is None:
            return contextlib.nullcontext()
        with self._guard:
            return self._run_locks.setdefault(run_id, threading.Lock())


def _run_of(args: tuple, kwargs: dict) -> str | None:
    """Which run a relayed call is about: its ``run_id``, else its first argument if a string."""
    return kwargs.get("run_id") or (args[0] if args and isinstance(args[0], str) else None)


class RelayClient:
    """The MlflowClient calls the platform makes, each executed by the relay actor.  Artifact
    files go straight from this node to the artifact store where it is one every node writes to
    (S3 with the node's role: the relay only tells where), else they travel to the relay as bytes."""

    def __init__(self, actor):
        self.actor = actor
        self.locations: dict[str, str] = {}  # run or model id → its artifact location

    def _call(self, method: str, *args, **kwargs) -> Any:
        import ray

        return ray.get(self.actor.call.remote(method, *args, **kwargs))

    # experiments
    def get_experiment_by_name(self, name: str) -> Experiment | None:
        return self._call("get_experiment_by_name", name)

    def create_experiment(self, name: str, artifact_location: str | None = None,
                          tags: dict[str, Any] | None = None) -> str:
        return self._call("create_experiment", name, artifact_location=artifact_location, tags=tags)

    def restore_experiment(self, experiment_id: str) -> None:
        return self._call("restore_experiment", experiment_id)

    def set_experiment_tag(self, experiment_id: str, key: str, value: Any) -> None:
        return self._call("set_experiment_tag", experiment_id, key, value)

    # runs
    def get_run(self, run_id: str) -> Run:
        return self._call("get_run", run_id)

    def search_runs(self, experiment_ids: list[str], filter_string: str = "", max_results: int = 1000,
                    order_by: list[str] | None = None, page_token: str | None = None) -> PagedList[Run]:
        return self._call("search_runs", experiment_ids, filter_string=filter_string, max_results=max_results,
                          order_by=order_by, page_token=page_token)

    def update_run(self, run_id: str, status: str | None = None) -> None:
        return self._call("update_run", run_id, status=status)

    def set_tag(self, run_id: str, key: str, value: Any) -> None:
        return self._call("set_tag", run_id, key, value)

    def delete_tag(self, run_id: str, key: str) -> None:
        return self._call("delete_tag", run_id, key)

    def get_metric_history(self, run_id: str, key: str) -> list[Metric]:
        return self._call("get_metric_history", run_id, key)

    def log_outputs(self, run_id: str, models: list[LoggedModelOutput]) -> None:
        return self._call("log_outputs", run_id, models)

    # artifacts
    def list_artifacts(self, run_id: str, path: str | None = None) -> list[FileInfo]:
        return self._call("list_artifacts", run_id, path)

    def download_artifacts(self, run_id: str, path: str, dst_path: str | None = None) -> str:
        """Downloaded where the relay runs: the driver's node."""
        return self._call("download_artifacts", run_id, path, dst_path)

    def log_artifact(self, run_id: str, local_path: str, artifact_path: str | None = None) -> None:
        import ray

        location = self._location(run_id, lambda: self.get_run(run_id).info.artifact_uri)
        if is_direct(location):
            return upload_direct(location, Path(local_path), artifact_path)
        data = Path(local_path).read_bytes()
        ray.get(self.actor.log_artifact_bytes.remote(run_id, Path(local_path).name, data, artifact_path))

    # logged models
    def create_logged_model(self, experiment_id: str, name: str | None = None, source_run_id: str | None = None,
                            params: dict[str, str] | None = None, model_type: str | None = None) -> LoggedModel:
        return self._call("create_logged_model", experiment_id, name=name, source_run_id=source_run_id,
                          params=params, model_type=model_type)

    def get_logged_model(self, model_id: str) -> LoggedModel:
        return self._call("get_logged_model", model_id)

    def finalize_logged_model(self, model_id: str, status) -> LoggedModel:
        return self._call("finalize_logged_model", model_id, status)

    def get_model_version(self, name: str, version: str) -> ModelVersion:
        return self._call("get_model_version", name, version)

    def log_model_artifacts(self, model_id: str, local_dir: str, artifact_path: str | None = None) -> None:
        import ray

        location = self._location(model_id, lambda: self.get_logged_model(model_id).artifact_location)
        if is_direct(location):
            return upload_direct(location, Path(local_dir), artifact_path)
        prefix = Path(artifact_path) if artifact_path else Path()
        files = {str(prefix / name): data for name, data in files_of(Path(local_dir)).items()}
        ray.get(self.actor.log_model_files.remote(model_id, files))

    # the relay itself
    def down(self, timeout: float = 15.0) -> str | None:
        """Why the tracking server does not answer its health check, asked from the relay's node;
        a relay too busy to answer in ``timeout`` s (its threads caught in MLflow's retries) or
        restarting counts as down."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get(self.actor.down.remote(), timeout=timeout)
        except GetTimeoutError:
            return f"the relay did not answer in {timeout:g} s"
        except RayActorError:
            return "the relay is restarting"

    def run(self, function: Callable[..., Any], *args, **kwargs) -> Any:
        """``function(client, *args, **kwargs)`` in the actor (``store.on_client``)."""
        import ray

        return ray.get(self.actor.run.remote(function, args, kwargs))

    def _location(self, key: str, ask: Callable[[], str]) -> str:
        if key not in self.locations:
            self.locations[key] = ask()
        return self.locations[key]
