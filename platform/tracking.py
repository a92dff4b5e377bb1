"""MLflow tracking (DESIGN.md §7) through explicit run ids (``MlflowClient``), no global state.

The process that launches a training run (the ``platform.train`` driver, or a Tune trial)
opens the run, logs params and the resolved config, and closes it as FINISHED or FAILED (with
the error as a tag) — so a run is never left RUNNING.  During training only rank 0 writes to
it: per-epoch metrics, hypotheses, plots and the best checkpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

from platform import config as config_io

ROOT = Path(__file__).resolve().parents[1]


def resolve_tracking_uri(flag: str | None = None) -> str:
    """``--tracking-uri``, else ``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the cwd;
    a store that cannot be reached is a one-line error here, before any work."""
    uri = flag or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"
    check_reachable(uri)
    return uri


def client(tracking_uri: str):
    """An MLflow client for ``tracking_uri``: direct, or through the relay actor if one runs."""
    relay = _find_relay(tracking_uri)
    if relay is not None:
        return RelayClient(relay)
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


# ------------------------------------------------------------------------------ the relay
# A store only the driver's machine can reach — an sqlite file, or a server bound to
# 127.0.0.1 as on the ray_cluster.yaml head — is written through one Ray actor pinned to the
# driver's node.  Workers on other nodes (rank 0 of a trial, trial drivers) send it their calls;
# one actor also serialises the writes that sqlite would otherwise refuse under contention.


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
    actor = ray.remote(num_cpus=0)(MlflowRelay).options(
        name=relay_name(tracking_uri), get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False))
    return actor.remote(tracking_uri)


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
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=tracking_uri)

    def call(self, method: str, *args, **kwargs):
        return getattr(self.client, method)(*args, **kwargs)

    def log_artifact_bytes(self, run_id: str, name: str, data: bytes, directory: str | None) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / name
            path.write_bytes(data)
            self.client.log_artifact(run_id, str(path), directory)


class RelayClient:
    """MlflowClient's methods, executed by the relay; artifact files travel as bytes."""

    def __init__(self, actor):
        self.actor = actor

    def log_artifact(self, run_id: str, local_path: str, artifact_path: str | None = None) -> None:
        import ray

        data = Path(local_path).read_bytes()
        ray.get(self.actor.log_artifact_bytes.remote(run_id, Path(local_path).name, data, artifact_path))

    def __getattr__(self, method: str):
        import ray

        return lambda *args, **kwargs: ray.get(self.actor.call.remote(method, *args, **kwargs))


def git_commit() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if commit.returncode:
        return "unknown"
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def dataset_sha256(meta: dict[str, Any]) -> str:
    """One hash of a prepared dataset: its inputs' hashes and its prepare settings."""
    payload = json.dumps({"inputs": sorted(meta.get("inputs_sha256", {}).values()), "config": meta.get("config")},
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def run_params(train_config, extra: dict[str, Any]) -> dict[str, str]:
    """Flat params: model fields under their paper names (p_enc, k_clip, ...), other sections dotted."""
    params: dict[str, Any] = {}
    for key, value in config_io.flat_dict(train_config).items():
        if key.startswith("model."):
            key = key[len("model."):]
            if key == "name":
                continue
        params[key] = value
    params.update(extra)
    return {key: str(value)[:6000] for key, value in params.items()}


def experiment_id(tracking_uri: str, name: str) -> str:
    mlflow_client = client(tracking_uri)
    experiment = mlflow_client.get_experiment_by_name(name)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            mlflow_client.restore_experiment(experiment.experiment_id)
        return experiment.experiment_id
    try:
        return mlflow_client.create_experiment(name)
    except Exception:  # created meanwhile by a concurrent trial
        return mlflow_client.get_experiment_by_name(name).experiment_id


def start_run(tracking_uri: str, experiment: str, run_name: str, params: dict[str, str], tags: dict[str, str],
              config_yaml: str, parent_run_id: str | None = None) -> str:
    """Create a run with its params, tags and ``config.yaml``; returns the run id."""
    from mlflow.entities import Param, RunTag

    mlflow_client = client(tracking_uri)
    all_tags = dict(tags)
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    run = mlflow_client.create_run(experiment_id(tracking_uri, experiment), run_name=run_name, tags=all_tags)
    run_id = run.info.run_id
    items = [Param(key, value) for key, value in params.items()]
    for start in range(0, len(items), 100):
        mlflow_client.log_batch(run_id, params=items[start:start + 100])
    mlflow_client.log_batch(run_id, tags=[RunTag("mlflow.note.content", f"resolved config:\n```\n{config_yaml}```")])
    log_text(tracking_uri, run_id, config_yaml, "config.yaml")
    return run_id


def find_run(tracking_uri: str, experiment: str, tags: dict[str, str]) -> str | None:
    """The id of a run of ``experiment`` carrying all ``tags`` (None if there is none)."""
    mlflow_client = client(tracking_uri)
    found = mlflow_client.get_experiment_by_name(experiment)
    if found is None:
        return None
    query = " and ".join(f"tags.{key} = '{value}'" for key, value in tags.items())
    runs = mlflow_client.search_runs([found.experiment_id], filter_string=query, max_results=1)
    return runs[0].info.run_id if runs else None


def end_run(tracking_uri: str, run_id: str, error: BaseException | str | None = None,
            only_if_running: bool = False) -> None:
    """Close the run FINISHED, or FAILED with the error as a tag.

    ``only_if_running`` leaves a run that someone else (the sweep driver) closed already as it
    is: a trial that Tune stopped may see its training interrupted after the driver marked its
    run FINISHED, and that interruption is not a failure."""
    mlflow_client = client(tracking_uri)
    if only_if_running and mlflow_client.get_run(run_id).info.status != "RUNNING":
        return
    if error is not None:
        message = str(error) if str(error) else type(error).__name__
        mlflow_client.set_tag(run_id, "error", message[:5000])
        mlflow_client.set_terminated(run_id, status="FAILED")
    else:
        mlflow_client.set_terminated(run_id, status="FINISHED")


def log_text(tracking_uri: str, run_id: str, text: str, artifact_file: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / Path(artifact_file).name
        path.write_text(text, encoding="utf-8")
        parent = str(Path(artifact_file).parent)
        client(tracking_uri).log_artifact(run_id, str(path), None if parent == "." else parent)


class RunLogger:
    """What rank 0 writes to an open run.

    For training (``keep_going``), a tracking outage never stops the run: a call that still fails
    after MLflow's own HTTP retries is kept, in order, and retried with later calls (at most once
    a minute, see ``flush``); a call the store refuses (4xx) is dropped with a warning; ``close``
    makes a last try and names what is lost.  For a CLI (``keep_going=False``) any failure raises."""

    def __init__(self, tracking_uri: str, run_id: str, reopen: bool = True, keep_going: bool | None = None):
        self.tracking_uri, self.run_id = tracking_uri, run_id
        self.client = client(tracking_uri)
        self.pending: list[tuple[str, Callable[[], Any]]] = []
        self._retry_at = 0.0  # monotonic time of the next retry after a failure (0: none failed)
        self.keep_going = reopen if keep_going is None else keep_going  # training keeps going; a CLI fails
        if reopen:  # training (also after a restart from a checkpoint): the run is live again
            self._call("reopen the run", lambda: self.client.update_run(run_id, status="RUNNING"))

    def metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(key, float(value), now, step) for key, value in metrics.items()]
        self._call(f"metrics of step {step}", lambda: self.client.log_batch(self.run_id, metrics=items))

    def tag(self, key: str, value: str) -> None:
        self._call(f"tag {key}", lambda: self.client.set_tag(self.run_id, key, value))

    def get_tag(self, key: str) -> str | None:
        """A tag of the run (None if unset or the store is unreachable)."""
        try:
            return self.client.get_run(self.run_id).data.tags.get(key)
        except Exception as error:  # noqa: BLE001 - an outage: behave as if unset
            _warn(f"could not read tag {key} of run {self.run_id} ({_one_line(error)})")
            return None

    def artifact(self, path: str | Path, directory: str | None = None) -> None:
        # a copy: the file may be rewritten (plots, best checkpoint) before a delayed upload
        data = Path(path).read_bytes()
        name = Path(path).name
        self._call(f"artifact {directory or '.'}/{name}", lambda: _log_bytes(self.client, self.run_id, name, data, directory),
                   replaces=True)

    def text(self, text: str, artifact_file: str) -> None:
        self._call(f"artifact {artifact_file}", lambda: log_text(self.tracking_uri, self.run_id, text, artifact_file),
                   replaces=True)

    RETRY_AFTER_S = 60.0  # during an outage, new calls queue up without an attempt for this long

    def flush(self, force: bool = False) -> bool:
        """Send what is pending, in order; False if the store is still unreachable.

        After a failure the queue is retried at most every ``RETRY_AFTER_S`` (unless ``force``),
        and with MLflow's HTTP retries cut short, so an outage costs rank 0 seconds per epoch,
        not MLflow's minutes of back-off per call while the other ranks wait in a collective."""
        if not force and self.pending and time.monotonic() < self._retry_at:
            return False
        while self.pending:
            what, call = self.pending[0]
            try:
                with _quick_http(self._retry_at > 0):
                    call()
            except Exception as error:  # noqa: BLE001 - decide below whether it is an outage
                if not self.keep_going:
                    self.pending.pop(0)
                    raise
                if _refused(error):  # retrying cannot help: say what is lost, keep the rest going
                    self.pending.pop(0)
                    _warn(f"MLflow refused {what} for run {self.run_id}, not logged: {_one_line(error)}")
                    continue
                self._retry_at = time.monotonic() + self.RETRY_AFTER_S
                _warn(f"MLflow unreachable ({_one_line(error)}); {len(self.pending)} call(s) kept "
                      f"for run {self.run_id}, retried with a later one (first: {what})")
                return False
            self.pending.pop(0)
        self._retry_at = 0.0
        return True

    def close(self) -> list[str]:
        """A last try; returns (and warns about) what could not be logged."""
        self.flush(force=True)
        lost = [what for what, _ in self.pending]
        if lost:
            _warn(f"MLflow stayed unreachable: not logged to run {self.run_id}: {', '.join(lost)}")
        return lost

    def _call(self, what: str, call: Callable[[], Any], replaces: bool = False) -> None:
        if replaces:  # a newer version of the same artifact supersedes a queued one
            self.pending = [(w, c) for w, c in self.pending if w != what]
        self.pending.append((what, call))
        self.flush()


@contextlib.contextmanager
def _quick_http(enabled: bool):
    """While catching up after an outage: one HTTP try with a short timeout, not MLflow's minutes."""
    if not enabled:
        yield
        return
    saved = {key: os.environ.get(key) for key in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"], os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "0", "10"
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _log_bytes(mlflow_client, run_id: str, name: str, data: bytes, directory: str | None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / name
        path.write_bytes(data)
        mlflow_client.log_artifact(run_id, str(path), directory)


def _refused(error: BaseException) -> bool:
    """The store answered and refused the call (a 4xx-class MLflow error): retrying cannot help."""
    from mlflow.exceptions import MlflowException

    if not isinstance(error, MlflowException):
        return False
    try:
        return 400 <= int(error.get_http_status_code()) < 500
    except (TypeError, ValueError):
        return False


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return (text[:300] + "...") if len(text) > 300 else (text or type(error).__name__)


def _warn(message: str) -> None:
    import sys

    sys.stderr.write(f"warning: {message}\n")
    sys.stderr.flush()


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


def check_reachable(tracking_uri: str, timeout: float = 5.0) -> None:
    """Fail fast with one line when the store cannot be used, before any training starts."""
    from platform.errors import UserError

    if tracking_uri.startswith(("http://", "https://")):
        reason = _unreachable(tracking_uri.rstrip("/") + "/health", timeout)
        if reason is not None:
            raise UserError(f"cannot reach the MLflow tracking server at {tracking_uri} ({reason}); start it "
                            f"(mlflow server --host 127.0.0.1 ...) or pass another --tracking-uri")
    elif tracking_uri.startswith("sqlite:///"):
        directory = Path(tracking_uri[len("sqlite:///"):]).parent
        if not directory.is_dir():
            raise UserError(f"the directory of the MLflow database {tracking_uri} does not exist: {directory}")
        if not os.access(directory, os.W_OK):
            raise UserError(f"cannot write the MLflow database {tracking_uri}: {directory} is not writable")
