"""What rank 0 writes to an open MLflow run, kept going through a tracking outage."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from platform.tracking import spool as records
from platform.tracking.artifacts import files_of
from platform.tracking.relay import RelayClient
from platform.tracking.spool import Record, Spool, one_line, refused, run_missing, warn
from platform.tracking.store import client, metric_steps, model_steps, on_client, run_tags, server_down


def _holds_caller(method):
    """A ``RunLogger`` method whose wall time counts in ``held_s`` (see ``RunLogger._holding``)."""
    @functools.wraps(method)
    def held(self, *args, **kwargs):
        with self._holding():
            return method(self, *args, **kwargs)

    return held


class RunLogger:
    """What rank 0 writes to an open run.

    For training (``keep_going``), a tracking outage never stops the run, and never holds it up:
    calls are queued and a background thread sends them in order, so the training loop (and the
    other ranks, waiting for rank 0 in a collective) never wait on MLflow, whatever MLflow's own
    HTTP retries cost and whether the calls go straight to the store or through the relay actor.
    A call that still fails after those retries stays queued and is retried with later ones (at
    most once a minute, see ``flush``; every few seconds while ``drain`` waits for the queue); a
    call the store refuses (4xx) is dropped with a warning, except that a run missing from the
    store raises ``RunLost`` on the next call (every later call would be lost too).  Each call is
    a ``spool.Record``: with a ``spool`` (the runs' storage, ``spool.spool_root``), what is still
    queued when the writer ends (``settle``, ``close``) is kept there for a later replay once the
    server has not taken it within ``SETTLE_WAIT_S`` (at once while its health check says down),
    so neither an outage nor its length loses a record or holds a rank; without one ``close``
    waits ``CLOSE_WAIT_S``, makes a last try and names what is lost.  Mid-run, ``keep`` moves
    the queue to the spool at once (a trial's report, after which Tune may kill the writer), and
    the sender delivers the run's kept records before anything queued later, as does the next
    writer of the run (a restart from a checkpoint).  During an outage the sender
    first asks an HTTP server's ``/health`` (5 s) before it sends again, so a store that is still
    down costs seconds, not MLflow's retries.  Reads (``get_tag``, ``metric_steps``) wait at most
    ``READ_WAIT_S`` and count as unset when the store does not answer.  For a CLI
    (``keep_going=False``) every call is sent at once and any failure raises.

    ``held_s`` is the wall time the thread that made the logger spent in its calls (making it,
    writes, reads, drains): on rank 0, how long MLflow held training up (``tracking_wait_s``).
    Calls from other threads (the sender, the system-metrics sampler) do not count."""

    RETRY_AFTER_S = 60.0  # during an outage, new calls queue up without an attempt for this long
    READ_WAIT_S = 10.0  # how long a read may hold the caller
    # at the end, how long close() lets the sender finish; MLflow's own retries of one call to a
    # server that refuses connections take ~4 min (7 retries, back-off up to 2 min), so a call
    # begun just as the server went down may still be lost: close() names it
    CLOSE_WAIT_S = 150.0
    # with a spool, how long settle() lets a server that answers take what is queued before the
    # rest is kept in the spool (a server that does not answer its health check: no wait)
    SETTLE_WAIT_S = 30.0
    # while a caller waits in drain(), the queue is tried again this often (the health check
    # first), not only after RETRY_AFTER_S: the end of a run follows the store back within seconds
    DRAIN_RETRY_S = 5.0
    # drain(while_up=True) asks the server's health this often: a server that dies while a
    # caller waits holds it about this long, not until the next retry (a rank's report)
    DRAIN_HEALTH_S = 1.0

    def __init__(self, tracking_uri: str, run_id: str, reopen: bool = True, keep_going: bool | None = None,
                 spool: str | None = None):
        self.held_s = 0.0
        self._owner, self._in_call = threading.get_ident(), False  # whose calls held_s counts
        with self._holding():
            self.tracking_uri, self.run_id = tracking_uri, run_id
            self.client = client(tracking_uri)
            self.pending: list[Record] = []
            self.spool = Spool(spool) if spool else None
            self._retry_at = 0.0  # monotonic time of the next retry after a failure (0: none pending)
            # records of this run in the spool that precede the queue (``keep``; a writer before
            # this one, on a restart from a checkpoint): sent before it, so nothing older lands later
            self._kept = bool(spool) and reopen and self.spool.root.child(run_id).is_dir()
            self._outage = False  # the last attempt failed: probe before sending again
            self._said_down_at = -self.RETRY_AFTER_S  # when a probe last said so on the console
            self.keep_going = reopen if keep_going is None else keep_going  # training keeps going; a CLI fails
            self._lock = threading.Lock()  # guards pending
            self._sending = threading.Lock()  # one flush at a time
            self._wake = threading.Event()
            self._closing = False
            self._fatal: BaseException | None = None
            self._sender = None
            if self.keep_going:
                self._sender = threading.Thread(target=self._send_loop, name=f"mlflow-{run_id[:8]}", daemon=True)
                self._sender.start()
            if reopen:  # training (also after a restart from a checkpoint): the run is live again
                self._call(records.reopen())

    @contextlib.contextmanager
    def _holding(self):
        """Adds the block's wall time to ``held_s`` when the thread that made the logger runs it
        (the outermost block only: a public call that makes another counts once)."""
        if threading.get_ident() != self._owner or self._in_call:
            yield
            return
        self._in_call, began = True, time.monotonic()
        try:
            yield
        finally:
            self._in_call = False
            self.held_s += time.monotonic() - began

    @_holds_caller
    def metrics(self, metrics: dict[str, float], step: int) -> None:
        self._call(records.metrics(metrics, step))

    @_holds_caller
    def missing_metrics(self, history: list[dict[str, float]], key: str) -> None:
        """Log the entries of ``history`` (step = their ``key``) that the run does not have yet:
        what an outage kept from a worker that then died.  Which ones is decided when the call
        is sent, in order with the rest, so a store that is down now holds nobody up and gets
        nothing twice once it is back."""
        self._call(records.missing_metrics(history, key))

    @_holds_caller
    def tag(self, key: str, value: str) -> None:
        self._call(records.tag(key, value))

    @_holds_caller
    def get_tag(self, key: str) -> str | None:
        """A tag of the run (None if unset, or if the store does not answer in ``READ_WAIT_S``)."""
        tags = self._read(f"tag {key}", lambda: on_client(self.client, run_tags, self.run_id))
        return None if tags is None else tags.get(key)

    @_holds_caller
    def model_steps(self) -> set[int] | None:
        """The updates of the run's logged models (None if the store does not answer in time)."""
        steps = self._read("models", lambda: on_client(self.client, model_steps, self.run_id))
        return None if steps is None else set(steps)

    @_holds_caller
    def metric_steps(self, key: str) -> set[int] | None:
        """The steps at which ``key`` was logged (None if the store does not answer in time)."""
        steps = self._read(f"metric {key}", lambda: on_client(self.client, metric_steps, self.run_id, key))
        return None if steps is None else set(steps)

    def _read(self, what: str, call: Callable[[], Any]) -> Any:
        """``call()`` in a helper thread, waited for at most ``READ_WAIT_S`` (None after that, or
        on an error): a read never holds training for MLflow's minutes of retries."""
        box = {}

        def read() -> None:
            try:
                box["value"] = call()
            except Exception as error:  # noqa: BLE001 - reported below
                box["error"] = error

        reader = threading.Thread(target=read, name=f"mlflow-read-{self.run_id[:8]}", daemon=True)
        reader.start()
        reader.join(self.READ_WAIT_S if self.keep_going else None)
        if "value" in box:
            return box["value"]
        reason = one_line(box["error"]) if "error" in box else f"no answer in {self.READ_WAIT_S:.0f} s"
        warn(f"could not read {what} of run {self.run_id} ({reason}); taken as unset")
        return None

    @_holds_caller
    def artifact(self, path: str | Path, directory: str | None = None) -> None:
        # a copy: the file may be rewritten (plots, best checkpoint) before a delayed upload
        self._call(records.artifact(Path(path).name, Path(path).read_bytes(), directory), replaces=True)

    @_holds_caller
    def model(self, directory: Path, step: int, params: dict[str, str]) -> None:
        """Log a saved MLflow model directory (``tracking.model.save``) as the run's logged model."""
        self._call(records.logged_model(files_of(directory), step, params))  # a copy, read now

    @_holds_caller
    def text(self, text: str, artifact_file: str) -> None:
        parent = str(Path(artifact_file).parent)
        self._call(records.artifact(Path(artifact_file).name, text.encode("utf-8"), None if parent == "." else parent),
                   replaces=True)

    @_holds_caller
    def flush(self, force: bool = False) -> bool:
        """Send what is pending, in order, now; False if the store is still unreachable.

        After a failure the queue is retried at most every ``RETRY_AFTER_S`` (unless ``force``),
        and only once an HTTP server answers its health check again."""
        with self._sending:
            if not force and self._waiting() and time.monotonic() < self._retry_at:
                return False
            if self._outage and self._waiting() and (reason := self._down()):
                self._retry_at = time.monotonic() + self.RETRY_AFTER_S
                if time.monotonic() >= self._said_down_at + self.RETRY_AFTER_S:  # drain() asks more often
                    self._said_down_at = time.monotonic()
                    warn(f"MLflow still unreachable ({reason}); {len(self.pending)} call(s) kept for run "
                          f"{self.run_id}")
                return False
            while True:
                with self._lock:  # what ``keep`` moved to the spool meanwhile goes before the rest
                    kept, entry = self._kept, (self.pending[0] if self.pending else None)
                if kept:
                    if not self._send_kept():
                        return False
                    continue
                if entry is None:
                    break
                what = entry.what
                try:
                    records.apply(self.client, self.run_id, entry)
                except Exception as error:
                    if not self.keep_going:
                        self._remove(entry)
                        raise
                    if run_missing(error):  # every later call would be lost too: never train on silently
                        raise RunLost(f"MLflow run {self.run_id} is not an active run of {self.tracking_uri} "
                                      f"({one_line(error)}); stopping rather than training without tracking") from None
                    if refused(error):  # retrying cannot help: say what is lost, keep the rest going
                        self._remove(entry)
                        warn(f"MLflow refused {what} for run {self.run_id}, not logged: {one_line(error)}")
                        continue
                    self._retry_at, self._outage = time.monotonic() + self.RETRY_AFTER_S, True
                    warn(f"MLflow unreachable ({one_line(error)}); {len(self.pending)} call(s) kept "
                          f"for run {self.run_id}, retried with a later one (first: {what})")
                    return False
                self._remove(entry)
            self._retry_at, self._outage = 0.0, False
            return True

    def _waiting(self) -> bool:
        """Something is still to send: queued, or kept in the spool before the queue."""
        return bool(self.pending) or self._kept

    def _send_kept(self) -> bool:
        """This run's records kept in the spool, sent before the queue (its ends and the sweep's
        closing stay kept: the run goes on); False on an outage, which the queue then waits out.
        Cleared first: what ``keep`` adds during the replay sets it again."""
        with self._lock:
            self._kept = False
        try:
            self.spool.replay(self.client, self.run_id, log=warn, live=True)
        except Exception as error:  # an outage: retried with the queue (raised by a CLI)
            with self._lock:
                self._kept = True
            if not self.keep_going:
                raise
            self._retry_at, self._outage = time.monotonic() + self.RETRY_AFTER_S, True
            warn(f"MLflow unreachable ({one_line(error)}); the records of run {self.run_id} kept in "
                 f"{self.spool} are retried with the later ones")
            return False
        return True

    def _down(self) -> str | None:
        """Why the tracking server does not answer its health check now, asked from where the
        calls go: this process, or the relay's node (None: it answers, or it is not a server)."""
        if isinstance(self.client, RelayClient):
            return self.client.down()
        return server_down(self.tracking_uri)

    @_holds_caller
    def drain(self, timeout: float, while_up: bool = False) -> bool:
        """Wait up to ``timeout`` s for the sender to empty the queue (one forced try now);
        ``while_up``: stop waiting as soon as the server's health check says it is down."""
        if self._sender is None:
            return self.flush(force=True)
        deadline, retry, check = time.monotonic() + timeout, 0.0, 0.0
        while time.monotonic() < deadline and self._fatal is None:
            with self._lock:
                if not self._waiting():
                    return True
            if while_up and time.monotonic() >= check:  # a send under way may be stuck in MLflow's retries
                if self._down() is not None:
                    return False
                check = time.monotonic() + self.DRAIN_HEALTH_S
            if time.monotonic() >= retry:  # try now, not at the next minute
                self._retry_at, retry = 0.0, time.monotonic() + self.DRAIN_RETRY_S
                self._wake.set()
            time.sleep(0.1)
        return False

    @_holds_caller
    def settle(self) -> list[str]:
        """What is queued delivered, or kept: with a spool, what the server has not taken within
        ``SETTLE_WAIT_S`` (none of it while the server is down) goes to the spool; without one,
        the sender has ``CLOSE_WAIT_S``.  Returns what is lost (kept records are not)."""
        if self._sender is None:
            self.flush(force=True)
        elif self.spool is not None:
            self.drain(self.SETTLE_WAIT_S, while_up=True)
        else:
            self.drain(self.CLOSE_WAIT_S)
        return self._keep_pending()

    @_holds_caller
    def keep(self) -> None:
        """Mid-run, what is still queued moved to the spool, where it outlives this process (a
        writer that may be killed next, as Tune kills a trial it stops at a report); the sender
        delivers it before anything queued later once the store answers.  Without a spool, or
        where the spool cannot be written, it stays queued.  A send under way (stuck in MLflow's
        retries during an outage) is not waited for: its record is kept too, and may arrive
        twice, which is harmless (``spool``).  Each kept version of an artifact is sent (the
        queue keeps the newest only): an outage of many epochs costs their uploads afterwards."""
        if self.spool is None:
            return
        sending = self._sending.acquire(blocking=False)
        try:
            with self._lock:  # the sender sees the queue and the spool change at once
                left, self.pending = self.pending, []
                try:
                    if left:
                        self.spool.put(self.run_id, left)
                        self._kept = True
                except Exception as error:  # noqa: BLE001 - said: they stay queued, ahead of anything later
                    self.pending = left
                    self._kept = True  # those written before the failure go first, then the queue whole
                    warn(f"could not keep {len(left)} MLflow record(s) of run {self.run_id} in {self.spool}: "
                         f"{one_line(error)}; they stay queued")
                    return
        finally:
            if sending:
                self._sending.release()
        if left:
            self._wake.set()
            warn(f"MLflow has not taken {len(left)} record(s) of run {self.run_id}: kept in {self.spool} until it does")

    def _keep_pending(self) -> list[str]:
        """Move what is still queued to the spool; returns what is neither sent nor kept.  A send
        under way is waited for a moment (else its record could arrive both now and on replay);
        one stuck in MLflow's retries is not."""
        sending = self.spool is not None and self._sending.acquire(timeout=1.0)
        try:
            with self._lock:
                left = list(self.pending)
                if self.spool is not None:
                    self.pending = []
        finally:
            if sending:
                self._sending.release()
        if not left or self.spool is None:
            return [record.what for record in left]
        try:
            self.spool.put(self.run_id, left)
        except Exception as error:  # noqa: BLE001 - said below: the records are lost
            warn(f"could not keep {len(left)} MLflow record(s) of run {self.run_id} in {self.spool}: "
                 f"{one_line(error)}")
            return [record.what for record in left]
        warn(f"MLflow unreachable: {len(left)} record(s) of run {self.run_id} kept in {self.spool}; "
             f"they reach MLflow when the run is closed or the next command opens the store "
             f"(python -m platform.report --replay)")
        return []

    @_holds_caller
    def close(self) -> list[str]:
        """``settle``, then stop the sender (without a spool: one last try).  Returns (and warns
        about) what could be neither logged nor kept."""
        if self._sender is not None:
            self.drain(self.SETTLE_WAIT_S if self.spool is not None else self.CLOSE_WAIT_S,
                       while_up=self.spool is not None)
            self._closing = True
            self._wake.set()
            self._sender.join(timeout=5 if self.spool is not None else 30)
        if self.spool is None and (self._sender is None or not self._sender.is_alive()):
            try:
                self.flush(force=True)
            except RunLost as error:
                warn(str(error))
        lost = self._keep_pending()
        if lost:
            warn(f"MLflow stayed unreachable: not logged to run {self.run_id}: {', '.join(lost)}")
        return lost

    def _call(self, record: Record, replaces: bool = False) -> None:
        if self._fatal is not None:
            raise self._fatal
        with self._lock:
            if replaces:  # a newer version of the same artifact supersedes a queued one
                self.pending = [queued for queued in self.pending if queued.what != record.what]
            self.pending.append(record)
        if self._sender is None:
            self.flush()
        else:
            self._wake.set()

    def _remove(self, entry) -> None:
        with self._lock:
            if entry in self.pending:  # a newer version may have replaced it while it was sent
                self.pending.remove(entry)

    def _send_loop(self) -> None:
        """The sender thread: flush whenever something is queued, until close()."""
        while not self._closing:
            self._wake.wait(timeout=max(1.0, self._retry_at - time.monotonic()) if self._retry_at else None)
            self._wake.clear()
            if self._closing:
                return
            try:
                self.flush()
            except RunLost as error:
                self._fatal = error
                return
            except Exception as error:  # noqa: BLE001 - never let the thread die silently
                warn(f"MLflow sender for run {self.run_id}: {one_line(error)}")


class RunLost(RuntimeError):
    """The run being logged to is not in the store (deleted, or another store than the driver's)."""
