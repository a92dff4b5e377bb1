"""What rank 0 writes to an open MLflow run, kept going through a tracking outage."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from platform.tracking.artifacts import log_text, upload_bytes
from platform.tracking.store import client


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
        self._call(f"artifact {directory or '.'}/{name}", lambda: upload_bytes(self.client, self.run_id, name, data, directory),
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
                if _run_missing(error):  # every later call would be lost too: never train on silently
                    raise RunLost(f"MLflow run {self.run_id} does not exist in {self.tracking_uri} "
                                  f"({_one_line(error)}); stopping rather than training without tracking") from None
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


class RunLost(RuntimeError):
    """The run being logged to is not in the store (deleted, or another store than the driver's)."""


def _run_missing(error: BaseException) -> bool:
    from mlflow.exceptions import MlflowException

    return isinstance(error, MlflowException) and error.error_code == "RESOURCE_DOES_NOT_EXIST"


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
