"""What a tracking outage keeps from MLflow goes to the runs' spool and reaches a real server once
it is back (the cluster-wide case, rank 0 on a node without the head's files, a server killed
across a run's end: tests/launch/test_no_shared_disk.py)."""

import time

import pytest
from mlflow.tracking import MlflowClient
from servers import MlflowServer

from platform import report
from platform.sweeps.trial_runs import close_trial_run
from platform.tracking import runs
from platform.tracking import spool as records
from platform.tracking.logger import RunLogger
from platform.tracking.spool import Spool, spool_root


@pytest.mark.timed
def test_records_an_outage_keeps_at_a_runs_end_reach_the_store_in_order_and_the_run_closes_only_then(tmp_path,
                                                                                                      capsys):
    """Two runs write through a server killed before their end: their loggers close at once,
    keeping what the server did not take (metrics, tags, an artifact, a logged model's files) in
    the spool.  One keeps its own end; the other is a trial ASHA pruned: the sweep's closing is
    kept without a wait, then the interrupted trial's FAILED end.  Restarted, the trial's way of
    closing its run (``runs.end_run`` with the spool) and ``report --replay`` deliver everything,
    once, before the runs are closed, the sweep's word last (FINISHED, pruned, no error tag); the
    spool is empty after."""
    server = MlflowServer(tmp_path / "mlflow")
    (tmp_path / "mlflow").mkdir()
    storage = tmp_path / "runs"
    root = spool_root(str(storage))
    model_dir = tmp_path / "model"
    (model_dir / "sub").mkdir(parents=True)
    (model_dir / "MLmodel").write_text("flavors: {}\n")
    (model_dir / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 4)
    server.start()
    try:
        ids = [runs.start_run(server.uri, "spool", name, {}, {}, "") for name in ("trial", "closed-by-sweep")]
        loggers = [RunLogger(server.uri, run_id, spool=root) for run_id in ids]
        for logger in loggers:
            logger.metrics({"dev_bleu": 1.0}, step=1)
            assert logger.drain(60)
        server.stop()
        for n, logger in enumerate(loggers):
            logger.metrics({"dev_bleu": 2.0 + n}, step=2)
            logger.tag("best_step", "2")
            logger.text("a hypothesis\n", "dev_hypotheses/best.txt")
            logger.model(model_dir, 2, {"step": "2"})
            logger.metrics({"tracking_wait_s": logger.held_s}, step=2)
            began = time.monotonic()
            assert logger.close() == []  # kept, not lost
            assert time.monotonic() - began < 30  # the health check said down: no wait for MLflow's retries
        assert "record(s) of run" in capsys.readouterr().err
        Spool(root).put(ids[0], [records.end()])  # the trial's own end, kept after its records
        began = time.monotonic()
        close_trial_run(server.uri, "spool", "a-parent", "pruned-trial", ids[1], records.closing(True, None), root)
        assert time.monotonic() - began < 30 and "is kept in" in capsys.readouterr().out
        Spool(root).put(ids[1], [records.end("interrupted by Tune")])  # the torn-down trial, after the sweep's word
        assert records.deliver(server.uri, root, [ids[1]]) == [ids[1]]  # the sweep's next try: still down
        assert sorted(Spool(root).run_ids()) == sorted(ids)
        server.start()
        client = MlflowClient(server.uri)
        assert {client.get_run(run_id).info.status for run_id in ids} == {"RUNNING"}  # not before its records
        runs.end_run(server.uri, ids[0], spool=root)  # how a trial closes its own run: its records first
        assert len(client.get_metric_history(ids[0], "dev_bleu")) == 2 and Spool(root).run_ids() == [ids[1]]
        assert report.main(["--replay", "--storage-path", str(storage), "--tracking-uri", server.uri]) == 0
        assert "are in the store now" in capsys.readouterr().out
        for n, run_id in enumerate(ids):
            run = client.get_run(run_id)
            assert run.info.status == "FINISHED"
            assert [(m.step, m.value) for m in client.get_metric_history(run_id, "dev_bleu")] == [(1, 1.0),
                                                                                                 (2, 2.0 + n)]
            assert run.data.tags["best_step"] == "2" and "tracking_wait_s" in run.data.metrics
            assert (run.data.tags.get("pruned"), "error" in run.data.tags) == (("true" if n else None), False)
            assert [a.path for a in client.list_artifacts(run_id, "dev_hypotheses")] == ["dev_hypotheses/best.txt"]
            (output,) = run.outputs.model_outputs  # one model, its files uploaded
            assert client.get_logged_model(output.model_id).status.to_int() == 2  # READY
            (weights,) = [path for path in (tmp_path / "mlflow" / "artifacts").rglob("weights.bin")
                          if output.model_id in path.parts]
            assert weights.read_bytes() == bytes(range(256)) * 4
        assert Spool(root).run_ids() == []
        assert report.main(["--replay", "--storage-path", str(storage), "--tracking-uri", server.uri]) == 0  # none left
    finally:
        if server.process.poll() is None:
            server.stop()


def keep_and_die(uri: str, run_id: str, root: str) -> None:
    """A trial's rank 0 at a report during an outage, killed (as Tune kills a trial it stops)
    right after it kept what MLflow had not taken: no exit handler runs."""
    code = f"""
import os, signal
from platform.tracking.logger import RunLogger
logger = RunLogger({uri!r}, {run_id!r}, spool={root!r})
logger.metrics({{"dev_bleu": 3.0}}, step=3)
logger.tag("best_step", "3")
logger.text("epoch 3\\n", "best.txt")
assert not logger.drain(10, while_up=True)  # the server is down: no wait
logger.keep()
os.kill(os.getpid(), signal.SIGKILL)
"""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    assert "kept in" in done.stderr


def test_what_a_writer_keeps_mid_run_reaches_the_store_before_its_later_records(tmp_path, capsys):
    """At a report during an outage, rank 0 keeps what MLflow has not taken in the spool
    (``keep``).  A writer that goes on sends it, once the server is back, before what it logged
    after (the newer tag and artifact win); a writer killed after keeping leaves it on disk, and
    the next writer of the run (a restart from a checkpoint) sends it before its own records.
    Nothing is lost, nothing older lands later, and the spool is empty after."""
    server = MlflowServer(tmp_path / "mlflow")
    (tmp_path / "mlflow").mkdir()
    root = spool_root(str(tmp_path / "runs"))
    server.start()
    try:
        run_id = runs.start_run(server.uri, "spool", "trial", {}, {}, "")
        logger = RunLogger(server.uri, run_id, spool=root)
        logger.metrics({"dev_bleu": 1.0}, step=1)
        assert logger.drain(60)
        server.stop()
        logger.metrics({"dev_bleu": 2.0}, step=2)
        logger.tag("best_step", "2")
        logger.text("epoch 2\n", "best.txt")
        assert not logger.drain(10, while_up=True)
        logger.keep()
        assert logger.pending == []
        assert Spool(root).run_ids() == [run_id]  # on disk: it outlives the process
        server.start()
        logger.tag("best_step", "2b")  # later than what was kept: sent after it
        assert logger.drain(60) and Spool(root).run_ids() == []
        client = MlflowClient(server.uri)
        assert client.get_run(run_id).data.tags["best_step"] == "2b"
        assert [m.step for m in client.get_metric_history(run_id, "dev_bleu")] == [1, 2]
        assert logger.close() == []

        server.stop()
        keep_and_die(server.uri, run_id, root)
        assert Spool(root).run_ids() == [run_id]
        server.start()
        restarted = RunLogger(server.uri, run_id, spool=root)  # reopens the run, as a restarted rank 0 does
        restarted.text("epoch 4\n", "best.txt")
        restarted.tag("best_step", "4")
        assert restarted.drain(60) and Spool(root).run_ids() == []
        run = client.get_run(run_id)
        assert run.data.tags["best_step"] == "4"
        assert [(m.step, m.value) for m in client.get_metric_history(run_id, "dev_bleu")] == [(1, 1.0), (2, 2.0),
                                                                                              (3, 3.0)]
        (best,) = (tmp_path / "mlflow" / "artifacts").rglob("best.txt")
        assert best.read_text() == "epoch 4\n"
        assert restarted.close() == []
    finally:
        if server.process.poll() is None:
            server.stop()


def test_two_replays_of_one_runs_kept_records_overlap_without_an_error_or_a_lost_record(tmp_path):
    """A live writer's sender and the sweep's closing may replay one run's spool at once: each
    record one of them sent and removed is skipped by the other, neither fails, and every record
    is in the run, the spool empty after."""
    import threading

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id = runs.start_run(uri, "spool", "trial", {}, {}, "")
    spool = Spool(spool_root(str(tmp_path / "runs")))
    spool.put(run_id, [records.metrics({"dev_bleu": float(step)}, step) for step in range(1, 61)])
    clients = [MlflowClient(uri), MlflowClient(uri)]
    errors, live = [], [True, False]

    def replay(n: int) -> None:
        try:
            spool.replay(clients[n], run_id, ends=False, live=live[n])
        except Exception as error:  # noqa: BLE001 - collected for the assertion
            errors.append(error)

    threads = [threading.Thread(target=replay, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == []
    assert [m.step for m in clients[0].get_metric_history(run_id, "dev_bleu")] == list(range(1, 61))
    assert Spool(spool_root(str(tmp_path / "runs"))).run_ids() == []


@pytest.mark.timed
def test_a_report_waiting_on_a_busy_store_stops_waiting_within_seconds_of_the_servers_death(tmp_path):
    """A report's wait (``drain(while_up=True)``) on a store that answers its health check but is
    busy (its sqlite file locked: the send waits in the server), then a server SIGKILLed during
    the wait: the wait ends about ``DRAIN_HEALTH_S`` after the death, not at the next retry
    (``DRAIN_RETRY_S``, 5 s later), so rank 0 is held for a second, not for ``tracking_wait_s``
    that a run's check (``MlflowOutage.checked_run``: < 3 s) fails on."""
    import sqlite3
    import threading

    server = MlflowServer(tmp_path / "mlflow")
    (tmp_path / "mlflow").mkdir()
    server.start()
    lock = sqlite3.connect(tmp_path / "mlflow" / "mlflow.db", isolation_level=None, check_same_thread=False)
    try:
        run_id = runs.start_run(server.uri, "spool", "trial", {}, {}, "")
        logger = RunLogger(server.uri, run_id, spool=spool_root(str(tmp_path / "runs")))
        lock.execute("BEGIN EXCLUSIVE")  # the server's writes wait (sqlite's busy timeout), its health answers
        killed = []
        threading.Timer(0.5, lambda: (server.stop(), killed.append(time.monotonic()))).start()
        logger.metrics({"dev_bleu": 2.0}, step=2)
        assert not logger.drain(30, while_up=True)
        waited = time.monotonic() - killed[0]
        assert waited < 2.5, waited  # 3.5 s and more when only the retry asks the server's health
        logger.keep()
        assert logger.pending == [] and Spool(spool_root(str(tmp_path / "runs"))).run_ids() == [run_id]
    finally:
        lock.close()
        if server.process.poll() is None:
            server.stop()
