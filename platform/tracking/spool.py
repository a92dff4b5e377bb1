"""What a tracking outage means to every writer of a run, in one place: whether the store is down
(``store_down``), waiting for it where nothing can go on without it (``when_up``: a trial opening
its run, the sweep's own bookkeeping), and keeping what it cannot take on durable storage, to be
delivered when it answers again (the spool).

Every write (rank 0, a node's sampler, the trial that opened the run, the sweep that closes it)
is a ``Record`` of plain data: metrics, a tag, an artifact's bytes, a logged model's files, the
run's end, the sweep's closing of a trial's run; ``apply`` sends one.  ``RunLogger`` queues
records and sends them from a thread; what is still queued when a writer ends during an outage
goes to the run's **spool**, beside the runs' Ray storage (``<storage_path>/mlflow-spool/<run_id>/``,
shared by every node), instead of being waited for or lost.  A run's end goes through ``close``:
sent after the records the run kept, or kept after them while the store is down, so a run is
closed (FINISHED or FAILED) only after its records are in.  ``Spool.replay`` delivers a run's
records in the order they were made (its ends last, the sweep's closing after them); the run's
own closing does it, and so does the next command that opens the store (``replay_all``:
``platform.train``, ``platform.tune`` at its start and end, ``platform.report --replay``).

A record file is written after its data file and removed before it, so a record on disk always
has its data; a record is removed only once MLflow took it.  Replaying a record twice is
harmless: metrics are deduplicated by the store, tags and artifacts overwritten, a model keeps the
id it was created with (``model.log``), a run's end leaves a closed run as it is."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from platform.data.storage import Location, locate
from platform.errors import UserError
from platform.redaction import redact
from platform.tracking import model
from platform.tracking.artifacts import upload_bytes
from platform.tracking.health import server_down
from platform.tracking.relay import RelayClient, find_relay
from platform.tracking.store import client, log_metrics, log_missing_metrics, on_client, terminate

SPOOL_DIR = "mlflow-spool"
END = "end"
CLOSE = "close"  # the sweep's closing of a trial's run: the driver's word, applied after the run's ends


@dataclass(eq=False)  # queued records are told apart by identity (two equal tags are two calls)
class Record:
    """One write to a run: ``op`` (a key of ``_APPLY``), its JSON-able ``args``, and the bytes
    an artifact or a model carries (a model's files: relative path → bytes)."""

    op: str
    what: str  # as said in messages; a queued artifact is replaced by a newer one with the same ``what``
    args: dict[str, Any] = field(default_factory=dict)
    data: bytes | dict[str, bytes] | None = None


def reopen() -> Record:
    return Record("reopen", "reopen the run")


def metrics(values: dict[str, float], step: int) -> Record:
    now = int(time.time() * 1000)  # when it was measured, not when it reached the store
    return Record("metrics", f"metrics of step {step}",
                  {"values": {key: float(value) for key, value in values.items()}, "step": int(step), "at": now})


def missing_metrics(history: list[dict[str, float]], key: str) -> Record:
    entries = [{name: float(value) for name, value in entry.items()} for entry in history]
    return Record("missing_metrics", f"missed {key}s", {"key": key, "entries": entries,
                                                        "at": int(time.time() * 1000)})


def tag(key: str, value: str) -> Record:
    return Record("tag", f"tag {key}", {"key": key, "value": redact(str(value))})


def artifact(name: str, data: bytes, directory: str | None) -> Record:
    return Record("artifact", f"artifact {directory or '.'}/{name}", {"name": name, "directory": directory}, data)


def logged_model(files: dict[str, bytes], step: int, params: dict[str, str]) -> Record:
    # ``created`` keeps the model's id across retries and replays: one model, however often sent
    return Record("model", "the MLflow model", {"step": int(step), "params": params, "created": {}}, files)


def end(error: BaseException | str | None = None) -> Record:
    """The run's end: FAILED with ``error`` as its tag, else FINISHED (a run that someone else
    closed already stays as it is)."""
    return Record(END, "the end of the run", {"error": message_of(error)})


def closing(pruned: bool, error: str | None) -> Record:
    """The sweep's closing of a trial's run, which Tune ended: ``pruned`` (tagged so), FAILED
    with ``error``, else FINISHED.  The driver's word is final for a trial Tune saw complete:
    the trial process, torn down after it, may have closed its run FAILED as its training was
    interrupted (its ``error`` tag goes)."""
    return Record(CLOSE, "the sweep's closing of the run", {"pruned": bool(pruned), "error": error})


def close_as_driver(mlflow_client, run_id: str, pruned: bool, error: str | None) -> None:
    run = mlflow_client.get_run(run_id)
    if pruned:
        mlflow_client.set_tag(run_id, "pruned", "true")
    if error is None and run.info.status != "FINISHED":
        if "error" in run.data.tags:  # written by the interrupted trial process
            mlflow_client.delete_tag(run_id, "error")
        terminate(mlflow_client, run_id, None, False)
    elif run.info.status == "RUNNING":
        terminate(mlflow_client, run_id, error, False)


def message_of(error: BaseException | str | None) -> str | None:
    """What a run's ``error`` tag says of ``error`` (None: no error)."""
    return None if error is None else (str(error) or type(error).__name__)


def _apply_end(mlflow_client, run_id: str, record: Record) -> None:
    on_client(mlflow_client, terminate, run_id, record.args["error"], True)


_APPLY: dict[str, Callable[[Any, str, Record], Any]] = {
    "reopen": lambda c, run_id, r: c.update_run(run_id, status="RUNNING"),
    "metrics": lambda c, run_id, r: on_client(c, log_metrics, run_id, r.args["values"], r.args["step"], r.args["at"]),
    "missing_metrics": lambda c, run_id, r: on_client(c, log_missing_metrics, run_id, r.args["key"],
                                                      r.args["entries"], r.args["at"]),
    "tag": lambda c, run_id, r: c.set_tag(run_id, r.args["key"], r.args["value"]),
    "artifact": lambda c, run_id, r: upload_bytes(c, run_id, r.args["name"], r.data, r.args["directory"]),
    "model": lambda c, run_id, r: model.log(c, run_id, r.data, r.args["step"], r.args["params"], r.args["created"]),
    END: _apply_end,
    CLOSE: lambda c, run_id, r: on_client(c, close_as_driver, run_id, r.args["pruned"], r.args["error"]),
}


def apply(mlflow_client, run_id: str, record: Record) -> None:
    """Send ``record`` to run ``run_id`` (an ``MlflowClient`` or a ``RelayClient``)."""
    _APPLY[record.op](mlflow_client, run_id, record)


def run_missing(error: BaseException) -> bool:
    """The run is gone from the store: never created there, or deleted (MLflow then refuses
    every write with "must be in the 'active' state")."""
    from mlflow.exceptions import MlflowException

    if not isinstance(error, MlflowException):
        return False
    return error.error_code == "RESOURCE_DOES_NOT_EXIST" or "must be in the 'active' state" in str(error)


def refused(error: BaseException) -> bool:
    """The store answered and refused the call (a 4xx-class MLflow error): retrying cannot help."""
    from mlflow.exceptions import MlflowException

    if not isinstance(error, MlflowException):
        return False
    try:
        return 400 <= int(error.get_http_status_code()) < 500
    except (TypeError, ValueError):
        return False


def spool_root(storage_path: str) -> str:
    """Where the runs trained with ``storage_path`` keep what MLflow could not take."""
    return locate(storage_path).child(SPOOL_DIR).uri


class Spool:
    """The records kept under one spool root, a folder per run."""

    def __init__(self, root: str):
        self.root: Location = locate(root)

    def __str__(self) -> str:
        return str(self.root)

    def put(self, run_id: str, records: list[Record]) -> None:
        """Keep ``records`` of ``run_id``, in order, after any kept before."""
        folder, stamp = self.root.child(run_id), f"{time.time_ns():020d}-{os.getpid()}"
        for n, record in enumerate(records):
            name = f"{stamp}-{n:06d}"
            if record.data is not None:
                folder.child(name + ".bin").write_bytes_atomically(_pack(record.data))
            body = {"op": record.op, "what": record.what, "args": record.args}
            folder.child(name + ".json").write_bytes_atomically(json.dumps(body).encode())

    def run_ids(self) -> list[str]:
        """The runs with records kept."""
        from pyarrow.fs import FileSelector, FileType

        found = self.root.fs.get_file_info(FileSelector(self.root.path, allow_not_found=True))
        return sorted(info.base_name for info in found if info.type == FileType.Directory
                      and any(name.endswith(".json") for name in self.root.child(info.base_name).list_names()))

    def names(self, run_id: str) -> list[str]:
        """The kept records of ``run_id`` in the order to send them: as made, its ends last, the
        sweep's closing after them."""
        kept = sorted(name[:-len(".json")] for name in self.root.child(run_id).list_names() if name.endswith(".json"))
        last, order = {END: 1, CLOSE: 2}, {}
        for name in kept:
            try:
                order[name] = last.get(self._read(run_id, name)["op"], 0)
            except FileNotFoundError:  # sent and removed meanwhile by another replay of the run
                continue
        return sorted(order, key=order.get)  # stable: as made

    def load(self, run_id: str, name: str) -> Record:
        body = self._read(run_id, name)
        data = self.root.child(run_id).child(name + ".bin")
        payload = _unpack(body["op"], data.read_bytes()) if data.exists() else None
        return Record(body["op"], body["what"], body["args"], payload)

    def remove(self, run_id: str, name: str) -> None:
        folder = self.root.child(run_id)
        for part in (name + ".json", name + ".bin"):  # the record first: a record without its data is never left
            try:
                folder.child(part).delete()
            except UserError:
                if folder.child(part).exists():
                    raise  # else another replay of the run removed it meanwhile

    def replay(self, mlflow_client, run_id: str, ends: bool = True, log: Callable[[str], None] = print,
               live: bool = False) -> int:
        """Send ``run_id``'s kept records, each removed once MLflow took it (one the store refuses
        is named and dropped; all of them if the run is gone from the store); ``ends=False``
        drops the kept ends instead (the caller closes the run itself; the sweep's closing is
        sent all the same); ``live``: the run's writer goes on, so its ends and the sweep's
        closing stay kept for whoever closes the run, and so does its folder.  Two replays of
        one run may overlap (a live writer's and the sweep's closing): a record the other sent
        and removed is skipped.  Returns how many were sent; an outage on the way raises, and
        what is left stays kept."""
        sent = 0
        for name in self.names(run_id):
            try:
                record = self.load(run_id, name)
            except FileNotFoundError:  # another replay of the run (the sweep's closing, a live writer's) sent it
                continue
            if live and record.op in (END, CLOSE):
                continue
            if record.op == END and not ends:
                self.remove(run_id, name)
                continue
            try:
                apply(mlflow_client, run_id, record)
            except Exception as error:
                if run_missing(error):
                    log(f"warning: run {run_id} is not in the store ({one_line(error)}); its kept records "
                        f"in {self.root.child(run_id)} are dropped")
                    self.root.child(run_id).delete()
                    return sent
                if not refused(error):
                    raise
                log(f"warning: MLflow refused {record.what} of run {run_id}, not logged: {one_line(error)}")
            self.remove(run_id, name)
            sent += 1
        if not live and not self.root.child(run_id).list_names():  # a writer may be keeping more: not theirs to lose
            self.root.child(run_id).delete()
        return sent

    def _read(self, run_id: str, name: str) -> dict[str, Any]:
        return json.loads(self.root.child(run_id).child(name + ".json").read_bytes())


def close(tracking_uri: str, run_id: str, record: Record, root: str) -> bool:
    """A run's end (``end``) or the sweep's closing of it (``closing``), sent after the records
    the run kept in the spool ``root``; while the store is down it is kept there after them and
    nothing waits (False: kept).  A failure that is no outage is raised."""
    spool = Spool(root)
    if store_down(tracking_uri) is None:
        try:
            mlflow_client = client(tracking_uri)
            if spool.root.child(run_id).is_dir():
                spool.replay(mlflow_client, run_id, ends=False)
            apply(mlflow_client, run_id, record)
            return True
        except Exception as error:
            if store_down(tracking_uri) is None and _relay_died(error) is None:
                raise  # not an outage
    spool.put(run_id, [record])
    return False


def store_down(tracking_uri: str) -> str | None:
    """``server_down`` asked from where the store's calls go: the relay's node where a relay
    runs for it (a trial on a worker node cannot reach a server on the head's loopback), else
    here.  A store that is no server is never down."""
    if not tracking_uri.startswith(("http://", "https://")):
        return None
    relay = find_relay(tracking_uri)
    if relay is not None:
        return RelayClient(relay).down()
    return server_down(tracking_uri)


OUTAGE_WAIT_S = 1800.0  # how long a driver-side call waits for a tracking server that is down


def when_up(tracking_uri: str, call: Callable[[], Any], what: str, log: Callable[[str], None] = print,
            timeout: float = OUTAGE_WAIT_S, poll: float = 2.0) -> Any:
    """``call()`` once the tracking server answers its health check, and again if it fails
    because the server went down meanwhile (or the relay's process died: Ray starts it again):
    during an outage the caller (a sweep's trial opening its run, the sweep's own bookkeeping at
    its end) waits, with one line saying so, instead of failing after MLflow's retries.
    ``call`` must be safe to repeat.  A store still down after ``timeout`` seconds is a
    ``UserError``; any other failure is raised as it is."""
    deadline, said = time.monotonic() + timeout, False
    while True:
        reason = store_down(tracking_uri)
        if reason is None:
            try:
                return call()
            except Exception as error:  # an outage that began during the call is waited out
                reason = store_down(tracking_uri) or _relay_died(error)
                if reason is None:
                    raise
        if time.monotonic() > deadline:
            raise UserError(f"the MLflow tracking server at {redact(tracking_uri)} has been down for "
                            f"{timeout:.0f} s ({reason}); {what} could not be recorded")
        if not said:
            log(f"MLflow at {redact(tracking_uri)} does not answer ({reason}): {what} waits for it")
            said = True
        time.sleep(poll)


def _relay_died(error: BaseException) -> str | None:
    """Why a call failed if its relay's process died (Ray restarts it), else None."""
    try:
        from ray.exceptions import RayActorError
    except ImportError:
        return None
    return "the relay restarted" if isinstance(error, RayActorError) else None


def deliver(tracking_uri: str, root: str, run_ids: list[str]) -> list[str]:
    """Send the kept records of ``run_ids`` (ended runs) in the spool ``root`` if the store
    answers; returns those still kept (all of them while it is down)."""
    if store_down(tracking_uri) is not None:
        return run_ids
    mlflow_client, spool = client(tracking_uri), Spool(root)
    for n, run_id in enumerate(run_ids):
        try:
            if spool.root.child(run_id).is_dir():
                spool.replay(mlflow_client, run_id)
        except Exception:  # noqa: BLE001 - down again: the rest waits for the next try
            return run_ids[n:]
    return []


def replay_all(storage_path: str, tracking_uri: str, log: Callable[[str], None] = print) -> int:
    """Send every run's kept records under ``storage_path``'s spool to the store, if it answers
    (a store that is down is said in one line and left for later); returns how many were sent."""
    spool = Spool(spool_root(storage_path))
    if not spool.root.is_dir():
        return 0
    waiting = spool.run_ids()
    if not waiting:
        return 0
    if (reason := store_down(tracking_uri)) is not None:
        log(f"MLflow does not answer ({reason}): the kept records of {len(waiting)} run(s) in {spool} wait for it")
        return 0
    mlflow_client, sent = client(tracking_uri), 0
    for run_id in waiting:
        sent += spool.replay(mlflow_client, run_id, log=log)
    log(f"MLflow: {sent} kept record(s) of {len(waiting)} run(s) from {spool} are in the store now")
    return sent


def _pack(data: bytes | dict[str, bytes]) -> bytes:
    """An artifact's bytes as they are; a model's files as one tar."""
    if isinstance(data, bytes):
        return data
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in data.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _unpack(op: str, data: bytes) -> bytes | dict[str, bytes]:
    if op != "model":
        return data
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        return {member.name: tar.extractfile(member).read() for member in tar.getmembers() if member.isfile()}


def one_line(error: BaseException) -> str:
    """An error as one line of at most 300 characters (for warnings)."""
    text = " ".join(str(error).split())
    return (text[:300] + "...") if len(text) > 300 else (text or type(error).__name__)


def warn(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")
    sys.stderr.flush()
