"""Ray Tune sweeps (DESIGN.md §6): Optuna's TPE samples a space, ASHA stops weak trials, and
every trial is a function trainable that runs ``launch.driver.run`` (its own ``TorchTrainer``,
the Train V2 pattern); the sweep is an MLflow parent run with a child run per trial.

Knobs carry one name everywhere (``tracking.runs.param_name``): Optuna's and Tune's parameter
names, the summary table's columns and the trials' MLflow params.
"""

from __future__ import annotations

import math
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platform import atomic
from platform import config as config_io
from platform.data import storage
from platform.data.dataset import read_meta
from platform.errors import UserError
from platform.launch import lending
from platform.launch.cluster import release_orphaned_groups
from platform.launch.driver import Job, run
from platform.launch.spaces import Space, space_path
from platform.tracking import runs, store
from platform.launch.study import log_study, sweep_study
from platform.tracking.logger import RunLogger
from platform.tracking.tables import format_table, to_csv
from platform.training.config import load_train_config, resolve
from platform.training.metrics import shown

DRIVER_CPU = 0.1  # what each trial's function trainable (the trainer's driver) reserves


# ----------------------------------------------------------------------------- the searcher


def make_searcher(space: Space, seed: int, max_iterations: int, scheduler=None):
    """The sweep's searcher: Optuna's TPE through Ray's ``OptunaSearch``, telling pruned trials
    as PRUNED; with ``scheduler`` (the sweep's ASHA) it also saves and restores that scheduler's
    rungs with its own state (``scheduler_state``), which Ray does not (ray#30838)."""
    from ray.tune.search.optuna import OptunaSearch

    class PruneAwareOptunaSearch(OptunaSearch):
        """OptunaSearch that tells trials ended early by the scheduler as PRUNED.

        A trial that finishes without error before ``max_iterations`` epochs was stopped by
        ASHA (sweeps run without patience); Ray would report it COMPLETE with its early,
        low value.  Optuna's TPE treats pruned trials by their intermediate values instead."""

        def __init__(self, *args, max_iterations: int, scheduler=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.max_iterations = max_iterations
            self.scheduler = scheduler
            _check_internals(self)

        def save(self, checkpoint_path: str) -> None:
            """Ray saves the searcher with the experiment (and restores it on resume): the
            scheduler's rungs go along, as plain data (the scheduler itself is Ray's own object)."""
            scheduler = self.__dict__.pop("scheduler", None)
            self.scheduler_rungs = scheduler_state(scheduler) if scheduler is not None else None
            try:
                super().save(checkpoint_path)
            finally:
                self.scheduler = scheduler

        def restore(self, checkpoint_path: str) -> None:
            scheduler = self.__dict__.get("scheduler")
            super().restore(checkpoint_path)
            self.scheduler = scheduler
            saved = self.__dict__.get("scheduler_rungs")
            if scheduler is not None and saved is not None:
                restore_scheduler_state(scheduler, saved)

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
            from optuna.trial import TrialState

            stopped_early = (not error and result is not None
                             and result.get("training_iteration", 0) < self.max_iterations)
            if not stopped_early or trial_id in self._completed_trials:
                return super().on_trial_complete(trial_id, result, error)
            trial = self._ot_trials[trial_id]
            if self.metric in result:
                # Tune passes the result that made ASHA stop the trial here, not to on_trial_result:
                # Optuna keeps it as the pruned trial's last intermediate value (what TPE weighs);
                # a step already reported is ignored (Optuna's warning silenced)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    trial.report(result[self.metric], result["training_iteration"])
            self._ot_study.tell(trial, state=TrialState.PRUNED)
            self._completed_trials.add(trial_id)

    return PruneAwareOptunaSearch(space=space.define_by_run, metric=space.spec.metric, mode=space.spec.mode,
                                  points_to_evaluate=space.first_points(), seed=seed, max_iterations=max_iterations,
                                  scheduler=scheduler)


def scheduler_state(scheduler) -> dict[str, Any]:
    """ASHA's decisions so far as plain data: per bracket, each rung's milestone and the
    results recorded there by trial id, and how many trials it stopped."""
    return {"brackets": [[[milestone, dict(recorded)] for milestone, recorded in bracket._rungs]
                         for bracket in scheduler._brackets],
            "num_stopped": scheduler._num_stopped}


def restore_scheduler_state(scheduler, state: dict[str, Any]) -> None:
    """Put saved rungs back into a freshly built (or restored, empty) ASHA with the same
    settings, so a resumed sweep prunes exactly as an uninterrupted one."""
    brackets = state["brackets"]
    if [[m for m, _ in b._rungs] for b in scheduler._brackets] != [[m for m, _ in b] for b in brackets]:
        raise UserError("the sweep's saved ASHA rungs do not match its scheduler settings (max epochs changed?)")
    for bracket, saved in zip(scheduler._brackets, brackets):
        bracket._rungs = [(milestone, dict(recorded)) for milestone, recorded in saved]
    scheduler._num_stopped = state["num_stopped"]


def _check_internals(searcher) -> None:
    """``PruneAwareOptunaSearch`` tells Optuna about pruned trials through OptunaSearch's private
    ``_ot_study``, ``_ot_trials`` and ``_completed_trials``; a Ray that renamed them is an error
    naming the version here, not a wrong study later."""
    import ray

    missing = [name for name in ("_ot_study", "_ot_trials", "_completed_trials") if not hasattr(searcher, name)]
    if missing:
        raise RuntimeError(f"Ray {ray.__version__}'s OptunaSearch has no {', '.join(missing)}: the sweep's "
                           f"searcher needs a Ray within pyproject.toml's tested range")


# ----------------------------------------------------------------------------- the trial


def run_trial(sampled: dict[str, Any], setup: dict[str, Any]) -> None:
    """One Tune trial: resolve its config and train it with Ray Train (its own TorchTrainer)."""
    import ray.tune
    from ray.tune.integration.ray_train import TuneReportCallback

    started_at = time.time()
    trial_id = ray.tune.get_context().get_trial_id()
    space = setup["space"]
    config = load_train_config(space.trial_config(setup["base"], sampled))  # validated once, in the trial
    job = Job(**{**setup["job"], "run_name": f"{setup['sweep']}-{trial_id}", "started_at": started_at,
                 "trial_id": trial_id})
    tags = {"trial_id": trial_id, "sweep": setup["sweep"], "space": space.name}
    run(config, job, parent_run_id=setup["parent_run_id"], tags=tags, callbacks=[TuneReportCallback()],
        reuse=trial_run_tags(setup["parent_run_id"], trial_id))


def trial_run_tags(parent_run_id: str, trial_id: str) -> dict[str, str]:
    """The tags that identify a trial's MLflow run: its sweep's parent run and its Tune trial id
    (a trial id alone may recur in another sweep of the experiment)."""
    return {"mlflow.parentRunId": parent_run_id, "trial_id": trial_id}


def _close_trial_runs_callback(tracking_uri: str, experiment: str, parent_run_id: str, max_iterations: int):
    import ray.tune

    class CloseTrialRuns(ray.tune.Callback):
        """A trial stopped by ASHA is killed mid-training: its MLflow run is closed here, on the
        driver, as FINISHED with ``pruned=true`` (never left RUNNING).

        The driver's word is final for a trial Tune saw complete: the trial process, torn down
        after this callback, may fail its own ``end_run`` as its training is interrupted, and
        that must not turn a pruned trial into a FAILED run (nor leave its error tag)."""

        def on_trial_complete(self, iteration, trials, trial, **info):
            self._close(trial, error=None)

        def on_trial_error(self, iteration, trials, trial, **info):
            self._close(trial, error=f"trial {trial.trial_id} failed (see Ray logs)")

        def _close(self, trial, error):
            run_id = runs.find_run(tracking_uri, experiment, trial_run_tags(parent_run_id, trial.trial_id))
            if run_id is None:
                return
            client = store.client(tracking_uri)
            run = client.get_run(run_id)
            epochs = int(trial.last_result.get("training_iteration", 0)) if trial.last_result else 0
            if error is None and epochs < max_iterations:
                client.set_tag(run_id, "pruned", "true")
            if error is None and run.info.status != "FINISHED":
                if "error" in run.data.tags:  # written by the interrupted trial process
                    client.delete_tag(run_id, "error")
                runs.end_run(tracking_uri, run_id)
            elif run.info.status == "RUNNING":
                runs.end_run(tracking_uri, run_id, error=error)

    return CloseTrialRuns()


# ----------------------------------------------------------------------------- the sweep


@dataclass
class Sweep:
    name: str
    space: Space
    base: dict[str, Any]
    num_samples: int
    max_epochs: int
    seed: int
    job: dict[str, Any]  # launch.driver.Job fields except run_name
    experiment: str
    tracking_uri: str
    storage_path: str
    max_concurrent: int = 1
    parent_run_id: str = ""
    lend_idle_cpus: bool = False  # once no trial is left to start, empty slots' CPUs go to running trials (launch.lending)
    rows: list[dict[str, Any]] = field(default_factory=list)
    searcher: Any = None  # this session's searcher, when it made it (not on --resume: Ray restores its own)

    @property
    def path(self) -> str:
        return f"{self.storage_path.rstrip('/')}/{self.name}"


def max_concurrent_trials(workers: int, cpus_per_worker: float, gpus_per_worker: float,
                          requested: int | None = None, joined: bool = False, log=print) -> int:
    """How many trials run at once: ``requested`` (``--max-concurrent``; default as many as
    fit), at most what the cluster can fit.

    What the cluster can fit is what is up now, except on a cluster the driver joined
    (``--address``), whose autoscaler may add nodes (a ``ray up`` head whose GPU workers start
    on demand): there the limit is what the autoscaler's node types add up to where Ray
    publishes it, and otherwise what is up now or, when nothing fits yet, ``requested`` (default
    1); trials that do not fit yet wait for Ray's autoscaler (said in one line)."""
    import ray

    now = ray.cluster_resources()
    ceiling = _autoscaler_ceiling() if joined else None
    fits_now = trials_that_fit(now, workers, cpus_per_worker, gpus_per_worker)
    fits = trials_that_fit(ceiling, workers, cpus_per_worker, gpus_per_worker) if ceiling else fits_now
    if fits < 1 and joined and ceiling is None:  # e.g. a ray up head before its first GPU worker
        fits = requested or 1
    if fits < 1:
        raise UserError(f"the cluster ({_resources(now)}{f'; at most {_resources(ceiling)} with its autoscaler' if ceiling else ''}) "
                        f"cannot fit one trial of {workers} workers × {cpus_per_worker} CPUs / {gpus_per_worker} GPUs")
    wanted = min(requested or fits, fits)
    if wanted > fits_now:
        log(f"cluster: {_resources(now)} up now, {fits_now} trial(s) fit; the others wait for Ray's autoscaler to add "
            f"nodes" + (f" (up to {_resources(ceiling)})" if ceiling else ""))
    return wanted


def trials_that_fit(resources: dict[str, float], workers: int, cpus_per_worker: float, gpus_per_worker: float) -> int:
    """Trials of ``workers`` workers (and their driver's CPU) that ``resources`` hold at once."""
    fits = math.floor(resources.get("CPU", 0) / (workers * cpus_per_worker + DRIVER_CPU) + 1e-9)
    if gpus_per_worker > 0:
        fits = min(fits, math.floor(resources.get("GPU", 0) / (workers * gpus_per_worker) + 1e-9))
    return fits


def _autoscaler_ceiling() -> dict[str, float] | None:
    """The most the cluster's autoscaler can bring up (its node types × their max counts, what
    Ray itself reads from the GCS), or None without an autoscaler (a local or fixed cluster)."""
    try:
        from ray._private.state import state

        return state.get_max_resources_from_cluster_config() or None
    except Exception:  # noqa: BLE001 - an internal API: without it, what is up now is the limit
        return None


def _resources(resources: dict[str, float]) -> str:
    return f"{resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs"


def run_sweep(sweep: Sweep, resume: bool = False, callbacks: Sequence[Any] = (), verbose: bool = True):
    """Run (or resume) the sweep; returns Tune's ResultGrid.  ``callbacks`` are extra Tune
    callbacks (the quiet console); ``verbose`` keeps Tune's own console tables."""
    import ray.tune

    lender = lending.lender_name(sweep.parent_run_id) if sweep.lend_idle_cpus else ""
    setup = {"space": sweep.space, "base": sweep.base, "job": {**sweep.job, "lender": lender}, "sweep": sweep.name,
             "parent_run_id": sweep.parent_run_id}
    trainable = ray.tune.with_resources(ray.tune.with_parameters(run_trial, setup=setup), {"CPU": DRIVER_CPU})
    if resume and not ray.tune.Tuner.can_restore(str(sweep.path)):
        raise UserError(f"nothing to resume at {sweep.path}")
    release_orphaned_groups()  # what an interrupted sweep's teardown left reserved (a trial slot each)
    handle = lending.start_lender(lender) if lender else None
    try:
        if resume:  # Tune restores the callbacks it saved (a lending sweep's among them)
            return ray.tune.Tuner.restore(str(sweep.path), trainable=trainable, resume_errored=True).fit()
        lends = [lending.lending_callback(lender, sweep.num_samples, sweep.max_concurrent,
                                          sweep.job["cpus_per_worker"])] if lender else []
        return _new_tuner(sweep, trainable, [*callbacks, *lends], verbose).fit()
    finally:
        if handle is not None:
            lending.stop_lender(handle, lender)


def _new_tuner(sweep: Sweep, trainable, callbacks: Sequence[Any], verbose: bool):
    import ray.tune
    from ray.tune.schedulers import ASHAScheduler

    scheduler = ASHAScheduler(time_attr="training_iteration", max_t=sweep.max_epochs, grace_period=1,
                              reduction_factor=2)
    sweep.searcher = make_searcher(sweep.space, sweep.seed, sweep.max_epochs, scheduler=scheduler)
    return ray.tune.Tuner(
        trainable,
        tune_config=ray.tune.TuneConfig(
            metric=sweep.space.spec.metric, mode=sweep.space.spec.mode, num_samples=sweep.num_samples,
            search_alg=sweep.searcher, scheduler=scheduler,
            max_concurrent_trials=sweep.max_concurrent),
        run_config=ray.tune.RunConfig(
            name=sweep.name, storage_path=str(sweep.storage_path), verbose=None if verbose else 0,
            callbacks=[_close_trial_runs_callback(sweep.tracking_uri, sweep.experiment, sweep.parent_run_id,
                                                  sweep.max_epochs),
                       *callbacks]),
    )


def base_config(space_name: str, size: str, overrides: Sequence[str], max_epochs: int | None) -> dict[str, Any]:
    """Every trial's config data before its knobs: the space's model and recipe at ``size``
    (``training.config.resolve``, as ``platform.train`` resolves), without early stopping."""
    raw = config_io.read_yaml_mapping(space_path(space_name))
    data = resolve(str(raw.get("model")), size, recipe=raw.get("recipe"), overrides=overrides, max_epochs=max_epochs)
    data["patience"] = None  # ASHA decides; a trial ending early must mean "pruned"
    load_train_config(data)  # fail here on a bad --set, not in every trial
    return data


def trial_status(epochs: int, max_epochs: int, error: bool = False) -> str:
    """A finished trial as the summary and the console name it: ERROR, PRUNED (ASHA stopped it
    before ``max_epochs``; sweeps run without patience) or COMPLETE."""
    return "ERROR" if error else ("PRUNED" if epochs < max_epochs else "COMPLETE")


def summarize(results, sweep: Sweep) -> list[dict[str, Any]]:
    """One row per trial: knobs, best metrics over its epochs, epochs run, status."""
    rows = []
    for result in results:
        frame = result.metrics_dataframe
        metrics = result.metrics or {}
        trial_id = metrics.get("trial_id") or Path(result.path).name
        epochs = int(metrics.get("training_iteration", 0))
        status = trial_status(epochs, sweep.max_epochs, error=result.error is not None)
        row = {"trial": trial_id, **{k: result.config.get(k) for k in sweep.space.knobs}, "epochs": epochs, "status": status}
        for key in shown("best"):  # training.metrics.SHOWN
            if frame is not None and key in frame:
                row[key] = float(frame[key].max())
        rows.append(row)
    metric = sweep.space.spec.metric
    rows.sort(key=lambda r: -r.get(metric, float("-inf")) if sweep.space.spec.mode == "max" else r.get(metric, float("inf")))
    return rows


def best_row(rows: list[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """The best trial that ran to its end or was pruned (``rows`` come sorted, best first);
    a failed trial's partial score is never offered as the best config."""
    return next((row for row in rows if metric in row and row["status"] in ("COMPLETE", "PRUNED")), None)


def no_trial_finished(rows: list[dict[str, Any]], results) -> str | None:
    """None if some trial completed or was pruned; else one line with the first trial's error."""
    if any(row["status"] in ("COMPLETE", "PRUNED") for row in rows):
        return None
    errors = [result.error for result in results if result.error is not None]
    if not errors:
        return "no trial of the sweep finished"
    lines = [line.strip() for line in str(errors[0]).splitlines() if line.strip()]
    return f"no trial of the sweep finished; the first failed with: {lines[-1] if lines else type(errors[0]).__name__}"


def closing_lines(sweep: Sweep, rows: list[dict[str, Any]], plots: list[Path]) -> str:
    """What a user reads last: the best trial and the spread, the plot, where to compare the runs
    in MLflow, and the command that re-runs the best config."""
    metric, model = sweep.space.spec.metric, sweep.space.spec.model
    best = best_row(rows, metric)
    scored = [row[metric] for row in rows if metric in row and row["status"] in ("COMPLETE", "PRUNED")]
    lines = []
    if best is not None:
        lines.append(f"best: trial {best['trial']} ({best['status'].lower()}), {metric} {best[metric]:.2f}; "
                     f"worst finished or pruned trial {min(scored) if sweep.space.spec.mode == 'max' else max(scored):.2f}")
    for path in plots:
        lines.append(f"plot: {_relative(path)}")
    # MLflow 3.17's UI opens an experiment on its GenAI traces page whatever the experiment's
    # kind; ?workflowType=machine_learning opens the runs table (and the UI remembers the choice)
    page = f"#/experiments/{runs.experiment_id(sweep.tracking_uri, sweep.experiment)}?workflowType=machine_learning"
    if sweep.tracking_uri.startswith(("http://", "https://")):
        where = f"{sweep.tracking_uri.rstrip('/')}/{page}   (parent run {sweep.name}: expand it, tick its trials, then Compare)"
    else:
        where = (f"mlflow ui --backend-store-uri {sweep.tracking_uri}, then http://127.0.0.1:5000/{page}   "
                 f"(parent run {sweep.name}: expand it, tick its trials, then Compare)")
    lines.append(f"compare in MLflow: {where}")
    config = Path(sweep.path) / "best_config.yaml"
    flags = _rerun_flags(sweep)
    if best is not None and config.is_file():
        lines.append(f"re-run the best config: python -m platform.train --model {model} --config {_relative(config)}{flags}")
    elif best is not None:
        lines.append(f"re-run the best config: MLFLOW_TRACKING_URI={sweep.tracking_uri} mlflow artifacts download "
                     f"-r {sweep.parent_run_id} -a best_config.yaml -d . && "
                     f"python -m platform.train --model {model} --config best_config.yaml{flags}")
    return "\n".join(lines)


def _rerun_flags(sweep: Sweep) -> str:
    """The flags a re-run needs beyond the config: the sweep's data and MLflow store, where not the defaults."""
    from platform.data.encode import DEMO_DIR

    flags = ""
    data = sweep.job.get("data") or sweep.job["dataset_dir"]
    if storage.is_uri(data):
        flags += f" --data {data}"
    elif Path(data).resolve() != DEMO_DIR.resolve():
        flags += f" --data {_relative(Path(data))}"
    if sweep.experiment != "syntax-nmt":
        flags += f" --experiment {sweep.experiment}"
    if sweep.tracking_uri != store.default_tracking_uri():
        flags += f" --tracking-uri {sweep.tracking_uri}"
    return flags


def _relative(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def time_shares(results, launched_at: float, wall_s: float, slots: int, ended_at: float | None = None) -> dict[str, float]:
    """Where the sweep's time went, as shares of its trial slots' time (``wall_s × slots``,
    the sweep ending at ``ended_at``, default now): training steps, dev evaluation, trial
    start-up (trial start → first update), idle (slots without a trial once the last trial has
    started: nothing was left to run), and the rest (checkpoints, logging, scheduling); plus the
    seconds from the launch to the first update of any trial.  From the ``steps_s`` /
    ``eval_s`` / ``startup_s`` / ``first_step_at`` every trial reports (``training.loop.fit``)
    and the times of its results.

    An empty slot's CPUs lent to a running trial (``launch.lending``) train it: the trials'
    ``lent_steps_s`` (slot-seconds of updates on lent CPUs) move from idle to training steps,
    and ``steps_lent_share`` says how much of the steps' share they are."""
    totals = {"steps": 0.0, "eval": 0.0, "startup": 0.0, "lent_steps": 0.0}
    first_steps, spans = [], []
    ended_at = time.time() if ended_at is None else ended_at
    began = ended_at - wall_s
    for result in results:
        frame = result.metrics_dataframe
        if frame is None:
            continue
        if "timestamp" in frame:  # a resumed sweep: only the epochs of this session
            frame = frame[frame["timestamp"] >= began - 1]
        for key in totals:
            if f"{key}_s" in frame:
                totals[key] += float(frame[f"{key}_s"].fillna(0).sum())
        if "first_step_at" in frame and frame["first_step_at"].notna().any():
            first_steps.append(float(frame["first_step_at"].min()))
        if {"first_step_at", "startup_s", "timestamp"} <= set(frame) and frame["startup_s"].notna().any():
            start = float(frame["first_step_at"].min()) - float(frame["startup_s"].max())
            spans.append((start, max(start, float(frame["timestamp"].max()) + 0.5)))  # whole seconds: their middle
    capacity = max(wall_s * max(slots, 1), 1e-9)
    idle = idle_tail_s(spans, ended_at, slots)
    lent = min(totals.pop("lent_steps"), idle)  # lent: only ever an idle slot's
    totals["steps"] += lent
    shares = {f"time_share_{key}": value / capacity for key, value in totals.items()}
    shares["time_share_idle"] = (idle - lent) / capacity
    shares["time_share_other"] = max(0.0, 1.0 - sum(shares.values()))
    shares["steps_lent_share"] = lent / capacity
    shares["sweep_wall_s"] = wall_s
    if first_steps:
        shares["launch_to_first_step_s"] = max(0.0, min(first_steps) - launched_at)
    return shares


def idle_tail_s(spans: list[tuple[float, float]], ended_at: float, slots: int) -> float:
    """Slot-seconds without a trial after the last trial started (``spans``: each trial's start
    and end): time the sweep had nothing left to run in a free slot, not time lost to overhead."""
    if not spans:
        return 0.0
    last_start = max(start for start, _ in spans)
    window = max(0.0, ended_at - last_start)
    busy = sum(max(0.0, min(end, ended_at) - max(start, last_start)) for start, end in spans)
    return max(0.0, slots * window - busy)


def time_line(shares: dict[str, float], slots: int) -> str:
    """``time_shares`` in one line for the console."""
    wall = int(shares["sweep_wall_s"])
    parts = [f"{shares[f'time_share_{key}']:.0%} {label}" for key, label in
             (("steps", "training steps"), ("eval", "dev evaluation"), ("startup", "trial start-up"),
              ("idle", "idle (no trial left to start)"), ("other", "other (checkpoints, logging, scheduling)"))
             if f"time_share_{key}" in shares]
    notes = []
    if shares.get("steps_lent_share", 0.0) >= 0.005:
        notes.append(f"{shares['steps_lent_share']:.0%} on idle slots' CPUs lent to a running trial")
    used = 1.0 - shares.get("time_share_idle", 0.0)
    if used > 0 and shares.get("time_share_idle", 0.0) >= 0.005:  # what overhead costs, apart from the tail
        notes.append(f"{shares['time_share_steps'] / used:.0%} of the slots' time with a trial")
    if notes:
        parts[0] += f" ({'; '.join(notes)})"
    first = f"; first update {shares['launch_to_first_step_s']:.0f} s after launch" if "launch_to_first_step_s" in shares else ""
    return f"time: {wall // 60}m{wall % 60:02d}s; of {slots} trial slot(s): " + ", ".join(parts) + first


def log_summary(sweep: Sweep, rows: list[dict[str, Any]], results, shares: dict[str, float] | None = None) -> list[Path]:
    """Summary table, best config (re-runnable with platform.train --config), time shares and the
    sweep plot on the parent run; returns the plot's local path (in the sweep's directory) if any."""
    from platform.tracking import plots

    logger = RunLogger(sweep.tracking_uri, sweep.parent_run_id, reopen=False)
    local = "://" not in sweep.path and Path(sweep.path).is_dir()
    logger.text(format_table(rows) + "\n", "summary.md")
    logger.text(to_csv(rows), "summary.csv")
    best = best_row(rows, sweep.space.spec.metric)
    if best is not None:
        sampled = {k: best[k] for k in sweep.space.knobs if best.get(k) is not None}
        best_config = load_train_config(sweep.space.trial_config(sweep.base, sampled))
        logger.text(config_io.dump_yaml(best_config), "best_config.yaml")
        if local:
            text = config_io.dump_yaml(best_config).encode()
            atomic.write_file(Path(sweep.path) / "best_config.yaml", lambda handle: handle.write(text))
        logger.metrics({f"best_{sweep.space.spec.metric}": best[sweep.space.spec.metric]}, step=0)
        logger.tag("best_trial", str(best["trial"]))
        best_run = runs.find_run(sweep.tracking_uri, sweep.experiment, trial_run_tags(sweep.parent_run_id, str(best["trial"])))
        if best_run is not None:  # the best trial's MLflow model, also among the parent run's outputs
            runs.link_models(sweep.tracking_uri, best_run, sweep.parent_run_id)
    if shares:
        logger.metrics(shares, step=0)
    histories = {}
    for result in results:
        frame = result.metrics_dataframe
        if frame is not None and "dev_bleu" in frame:
            histories[str((result.metrics or {}).get("trial_id"))] = list(frame["dev_bleu"])
    log_knobs = {key for key, dist in sweep.space.spec.params.items() if dist.log}
    with tempfile.TemporaryDirectory(prefix="sweep-summary-") as scratch:  # where the plot goes for URI storage
        workdir = Path(sweep.path) if local else Path(scratch)
        paths = plots.sweep_plots(rows, histories, sweep.space.knobs, sweep.space.spec.metric, workdir, log_knobs)
        for path in paths:
            logger.artifact(path, "plots")  # sent at once (this logger does not queue)
    study = sweep_study(sweep.path, sweep.searcher)
    if study is not None:  # the Optuna study, for optuna-dashboard, and Optuna's own plots
        log_study(logger, study, sweep.name, sweep.path)
    return paths if local else []


def existing_sweep(tracking_uri: str, experiment: str, name: str, resume: bool) -> str | None:
    """The parent run of the sweep ``name``, if there is one.  A name is one sweep per
    experiment: reusing it without --resume is refused, so every later lookup (the parent on
    --resume, a trial's run under its parent) finds exactly one run."""
    run_id = runs.find_run(tracking_uri, experiment, {"sweep_parent": name})
    if run_id is not None and not resume:
        raise UserError(f"a sweep named {name!r} exists in experiment {experiment!r} (MLflow run "
                        f"{run_id}); add --resume to continue it, or choose another --name")
    return run_id


def parent_run(sweep: Sweep, resume: bool) -> str:
    """The sweep's parent run: reopened on --resume (never a duplicate), else created."""
    run_id = existing_sweep(sweep.tracking_uri, sweep.experiment, sweep.name, resume)
    if run_id is not None:
        store.client(sweep.tracking_uri).update_run(run_id, status="RUNNING")
        return run_id
    params = {"space": sweep.space.name, "model": sweep.space.spec.model, "num_samples": sweep.num_samples,
              "max_epochs": sweep.max_epochs, "seed": sweep.seed, "searcher": "optuna-tpe", "scheduler": "asha",
              "metric": sweep.space.spec.metric, "workers_per_trial": sweep.job["workers"],
              "gpus_per_worker": sweep.job["gpus_per_worker"], "max_concurrent": sweep.max_concurrent,
              "git_commit": sweep.job["git_commit"]}
    space_text = space_path(sweep.space.name).read_text(encoding="utf-8")
    run_id = runs.start_run(sweep.tracking_uri, sweep.experiment, sweep.name, {k: str(v) for k, v in params.items()},
                            {"sweep_parent": sweep.name, "space": sweep.space.name}, space_text, source="platform.tune")
    data = sweep.job.get("data") or sweep.job["dataset_dir"]  # the runs table's Dataset column, as on the trials
    runs.log_dataset_inputs(sweep.tracking_uri, run_id, data, read_meta(sweep.job["dataset_dir"]))
    return run_id
