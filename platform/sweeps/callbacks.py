"""The sweep's Ray Tune and Ray Train callbacks (imported where a sweep runs: Ray Tune is heavy).
Tune pickles the experiment's callbacks with its state, for ``--resume``: they hold plain data
(no stream, no credential)."""

from __future__ import annotations

import sys
import time

import ray.tune
from ray.tune.integration.ray_train import TuneReportCallback

from platform.launch.worker import LAST_REPORT, RUN_ID
from platform.redaction import redact
from platform.sweeps.console import epoch_text, first_error_line, knob_text, live_table
from platform.sweeps.trial_runs import close_trial_run, held_tracking_uri, tracking_uri_of
from platform.tracking import spool as outage
from platform.training.stopping import STOPPED_EARLY, trial_status


class FinalAfterFit(TuneReportCallback):
    """Ray's ``TuneReportCallback`` (a trial's Ray Train callback), but the report after which
    training ends (``LAST_REPORT``) waits for ``fit`` to return (``sweep.report_last``).  Tune
    stops a trial on the result that reaches the scheduler's ``max_t``; were that result seen
    before the Train controller had shut down, Tune would kill the trial with its controller,
    and the controller's request to Ray's autoscaler for the trial's GPUs would stand until it
    expires (180 s), keeping the nodes of an ended sweep up that long."""

    def after_report(self, run_context, metrics, checkpoint):
        if not metrics[0].get(LAST_REPORT):
            super().after_report(run_context, metrics, checkpoint)


class CloseTrialRuns(ray.tune.Callback):
    """A trial stopped by ASHA is killed mid-training: its MLflow run is closed here, on the
    driver, as FINISHED with ``pruned=true`` (never left RUNNING), before Tune tears the trial
    down (``spool.closing``: the driver's word is final).  During a tracking outage the closing
    is kept in the run's spool after the trial's own records (``spool.close``), so Tune's event
    loop, where the other trials' results, ASHA's decisions and new trials' starts happen, never
    waits on MLflow; it is delivered at the next result once the server is back, or at the
    sweep's end.  It holds the tracking URI only where that carries no credential
    (``trial_runs.held_tracking_uri``)."""

    RETRY_S = 30.0  # during an outage, the kept closings are tried again at most this often

    def __init__(self, tracking_uri: str, experiment: str, parent_run_id: str, max_iterations: int, spool: str):
        super().__init__()
        self.held = held_tracking_uri(tracking_uri)
        self.experiment, self.parent_run_id, self.spool = experiment, parent_run_id, spool
        self.max_iterations = max_iterations
        self.kept: list[str] = []  # the runs whose closing waits in the spool for the server
        self.next_try = 0.0  # monotonic time before which no delivery is tried (a health check costs seconds)

    def setup(self, **info) -> None:  # also after --resume, which unpickles this callback
        self.next_try = 0.0

    def on_trial_result(self, iteration, trials, trial, result, **info):
        # a server back from an outage gets the closings within RETRY_S, not at the sweep's end
        if self.kept and time.monotonic() >= self.next_try:
            self.next_try = time.monotonic() + self.RETRY_S
            self.kept = outage.deliver(tracking_uri_of(self.held), self.spool, self.kept)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._close(trial, error=None)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._close(trial, error=f"trial {trial.trial_id} failed (see Ray logs)")

    def _close(self, trial, error: str | None) -> None:
        pruned = error is None and trial_status(trial.last_result, self.max_iterations) == "PRUNED"
        try:
            kept = close_trial_run(tracking_uri_of(self.held), self.experiment, self.parent_run_id, trial.trial_id,
                                   (trial.last_result or {}).get(RUN_ID), outage.closing(pruned, error), self.spool)
        except Exception as failure:  # noqa: BLE001 - one trial's bookkeeping must not end the others'
            print(f"warning: the close of trial {trial.trial_id}'s run failed: {redact(str(failure))}", flush=True)
            return
        self.kept += [kept] if kept else []


class SweepConsole(ray.tune.Callback):
    """What a quiet sweep prints (``sweeps.console``): a line per trial start, epoch and end, and
    every ``table_every_s`` seconds the trials so far."""

    def __init__(self, knobs: list[str], metric: str, max_epochs: int, table_every_s: float = 180.0) -> None:
        super().__init__()
        self.knobs, self.metric, self.max_epochs, self.table_every_s = knobs, metric, max_epochs, table_every_s
        self.started = time.monotonic()
        self.last_table = self.started

    def setup(self, **info) -> None:  # also after --resume, which unpickles this callback
        self.started = time.monotonic()
        self.last_table = self.started

    def _print(self, line: str) -> None:
        print(line, file=sys.stdout, flush=True)

    def _elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 60:3d}:{seconds % 60:02d}"

    def on_trial_start(self, iteration, trials, trial, **info):
        self._print(f"[{self._elapsed()}] trial {trial.trial_id} started   {knob_text(trial.config, self.knobs)}")

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._print(f"[{self._elapsed()}] trial {trial.trial_id} {epoch_text(result, self.max_epochs)}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = trial.last_result or {}
        epochs = int(result.get("training_iteration", 0))
        finished = trial_status(result, self.max_epochs) == "COMPLETE"
        how = ("finished" if finished and not result.get(STOPPED_EARLY) else
               f"stopped early after epoch {epochs} (patience)" if finished else
               f"stopped by the scheduler after epoch {epochs}")
        self._print(f"[{self._elapsed()}] trial {trial.trial_id} {how}")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._print(f"[{self._elapsed()}] trial {trial.trial_id} FAILED: {first_error_line(trial)}")

    def on_step_end(self, iteration, trials, **info):
        now = time.monotonic()
        if now - self.last_table >= self.table_every_s and trials:
            self.last_table = now
            table = live_table(trials, self.knobs, self.metric, self.max_epochs)
            self._print(f"[{self._elapsed()}] trials so far:\n{table}")


class ConfirmProgress(ray.tune.Callback):
    """A line per finished confirmation run: its candidate, seed and test scores."""

    def __init__(self, labels: list[str], entries: list[dict[str, int]]) -> None:
        super().__init__()
        self.labels, self.entries = labels, entries

    def on_trial_complete(self, iteration, trials, trial, **info):
        entry, result = self.entries[trial.config["entry"]], trial.last_result or {}
        if "test_bleu" in result:
            print(f"confirmed {self.labels[entry['index']]}, seed {entry['seed']}: test BLEU "
                  f"{result['test_bleu']:.2f}, chrF {result['test_chrf']:.2f}", flush=True)

