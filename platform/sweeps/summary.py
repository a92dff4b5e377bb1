"""The end of a sweep: a row per trial, where the trial slots' time went, what is logged on the
parent run (summary table, best config, plots, the Optuna study) and the closing lines."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from platform import atomic, config_io
from platform.data import storage
from platform.data.builtin import DEMO_DIR
from platform.sweeps.study import load_study, log_study
from platform.sweeps.sweep import Sweep, trial_seed
from platform.sweeps.trial_runs import trial_run_tags
from platform.tracking import plots, relay, runs, store
from platform.tracking.logger import RunLogger
from platform.tracking.tables import format_table, to_csv
from platform.training.config import load_train_config
from platform.training.metrics import shown
from platform.training.stopping import trial_status


def summarize(results, sweep: Sweep) -> list[dict[str, Any]]:
    """One row per trial: knobs (blank where its recipe has none), seed, the best of each
    metric over its epochs, epochs run, status; with several objectives, ``pareto`` marks the
    rows no other finished row dominates."""
    rows = []
    base_seed = sweep.space.base_config.seed
    objectives = sweep.space.objectives
    for result in results:
        if result.config is None:  # never started: the time budget ran out first
            continue
        frame = result.metrics_dataframe
        metrics = result.metrics or {}
        trial_id = metrics.get("trial_id") or Path(result.path).name
        epochs = int(metrics.get("training_iteration", 0))
        status = trial_status(metrics, sweep.max_epochs, error=result.error is not None)
        row = {"trial": trial_id, **{k: result.config.get(k) for k in sweep.space.knobs}}
        if sweep.seeds_per_config > 1:
            row["seed"] = trial_seed(base_seed, result.config)
        row.update({"epochs": epochs, "status": status})
        for key in shown("best"):  # training.metrics.SHOWN
            if frame is not None and key in frame:
                row[key] = float(frame[key].max())
        for key, mode in objectives[1:]:
            if frame is not None and key in frame:
                row[key] = float(frame[key].max() if mode == "max" else frame[key].min())
        rows.append(row)
    if len(objectives) > 1:
        mark_pareto_front(rows, objectives)
    metric = sweep.space.spec.metric
    if sweep.space.spec.mode == "max":
        rows.sort(key=lambda r: -r.get(metric, float("-inf")))
    else:
        rows.sort(key=lambda r: r.get(metric, float("inf")))
    return rows


def mark_pareto_front(rows: list[dict[str, Any]], objectives: list[tuple[str, str]]) -> None:
    """``pareto: yes`` on each finished row that no other finished row dominates (as good in
    every objective and better in one)."""
    def sign(mode: str) -> float:
        return 1.0 if mode == "max" else -1.0

    scored = [r for r in rows if r["status"] in ("COMPLETE", "PRUNED") and all(k in r for k, _ in objectives)]
    points = {id(r): [sign(mode) * r[key] for key, mode in objectives] for r in scored}

    def dominated(row) -> bool:
        mine = points[id(row)]
        return any(all(a >= b for a, b in zip(points[id(o)], mine)) and points[id(o)] != mine for o in scored)

    for row in rows:
        row["pareto"] = "yes" if id(row) in points and not dominated(row) else ""


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
    metric = sweep.space.spec.metric
    best = best_row(rows, metric)
    model = sweep.space.model
    if best is not None:
        model = sweep.space.model_of({k: best[k] for k in sweep.space.knobs if best.get(k) is not None})
    scored = [row[metric] for row in rows if metric in row and row["status"] in ("COMPLETE", "PRUNED")]
    lines = []
    if best is not None:
        lines.append(f"best: trial {best['trial']} ({best['status'].lower()}), {metric} {best[metric]:.2f}; "
                     f"worst finished or pruned trial "
                     f"{min(scored) if sweep.space.spec.mode == 'max' else max(scored):.2f}")
    if sweep.time_budget_s and len(rows) < sweep.num_samples:
        lines.append(f"time budget of {sweep.time_budget_s:g} s reached: {len(rows)} of {sweep.num_samples} "
                     "trials started; the running ones were stopped there (pruned), the rest never started")
    front = [row for row in rows if row.get("pareto") == "yes"]
    if front:
        names = ", ".join(key for key, _ in sweep.space.objectives)
        lines.append(f"Pareto front ({names}): " + "; ".join(
            f"trial {row['trial']} " + " / ".join(f"{row[key]:.4g}" for key, _ in sweep.space.objectives)
            for row in front))
    for path in plots:
        lines.append(f"plot: {_relative(path)}")
    # MLflow 3.17's UI opens an experiment on its GenAI traces page whatever the experiment's
    # kind; ?workflowType=machine_learning opens the runs table (and the UI remembers the choice)
    page = f"#/experiments/{runs.experiment_id(sweep.tracking_uri, sweep.experiment)}?workflowType=machine_learning"
    if sweep.tracking_uri.startswith(("http://", "https://")):
        where = (f"{sweep.tracking_uri.rstrip('/')}/{page}   "
                 f"(parent run {sweep.name}: expand it, tick its trials, then Compare)")
    else:
        where = (f"mlflow ui --backend-store-uri {sweep.tracking_uri}, then http://127.0.0.1:5000/{page}   "
                 f"(parent run {sweep.name}: expand it, tick its trials, then Compare)")
    lines.append(f"compare in MLflow: {where}")
    config = Path(sweep.path) / "best_config.yaml"
    flags = _rerun_flags(sweep)
    if best is not None and config.is_file():
        lines.append(f"re-run the best config: python -m platform.train --model {model} "
                     f"--config {_relative(config)}{flags}")
    elif best is not None:
        lines.append(f"re-run the best config: MLFLOW_TRACKING_URI={sweep.tracking_uri} mlflow artifacts download "
                     f"-r {sweep.parent_run_id} -a best_config.yaml -d . && "
                     f"python -m platform.train --model {model} --config best_config.yaml{flags}")
    return "\n".join(lines)


def _rerun_flags(sweep: Sweep) -> str:
    """The flags a re-run needs beyond the config: the sweep's data and MLflow store, where not the defaults."""
    flags = ""
    data = sweep.job.dataset.name
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


def time_shares(results, launched_at: float, wall_s: float, slots: int,
                ended_at: float | None = None) -> dict[str, float]:
    """Where the sweep's time went, as shares of its trial slots' time (``wall_s × slots``,
    the sweep ending at ``ended_at``, default now): training steps, dev evaluation, trial
    start-up (trial start → first update), idle (slots without a trial once the last trial has
    started: nothing was left to run), and the rest (checkpoints, logging, scheduling); plus the
    seconds from the launch to the first update of any trial.  From the ``steps_s`` /
    ``eval_s`` / ``startup_s`` / ``first_step_at`` every trial reports (``training.loop.fit``)
    and the times of its results.  Each slot-second is counted once: "other" is what is left."""
    totals = {"steps": 0.0, "eval": 0.0, "startup": 0.0}
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
    shares = {f"time_share_{key}": value / capacity for key, value in totals.items()}
    shares["time_share_idle"] = idle_tail_s(spans, ended_at, slots) / capacity
    shares["time_share_other"] = max(0.0, 1.0 - sum(shares.values()))
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
    used = 1.0 - shares.get("time_share_idle", 0.0)
    if used > 0 and shares.get("time_share_idle", 0.0) >= 0.005:  # what overhead costs, apart from the tail
        parts[0] += f" ({shares['time_share_steps'] / used:.0%} of the slots' time with a trial)"
    first = ""
    if "launch_to_first_step_s" in shares:
        first = f"; first update {shares['launch_to_first_step_s']:.0f} s after launch"
    return f"time: {wall // 60}m{wall % 60:02d}s; of {slots} trial slot(s): " + ", ".join(parts) + first


def log_summary(sweep: Sweep, rows: list[dict[str, Any]], results,
                shares: dict[str, float] | None = None) -> list[Path]:
    """Summary table, best config (re-runnable with platform.train --config), time shares and the
    sweep plot on the parent run; returns the plot's local path (in the sweep's directory) if any."""
    logger = RunLogger(sweep.tracking_uri, sweep.parent_run_id, reopen=False)
    local = "://" not in sweep.path and Path(sweep.path).is_dir()
    logger.text(format_table(rows) + "\n", "summary.md")
    logger.text(to_csv(rows), "summary.csv")
    best = best_row(rows, sweep.space.spec.metric)
    if best is not None:
        sampled = {k: best[k] for k in sweep.space.knobs if best.get(k) is not None}
        best_config = load_train_config(sweep.space.trial_config(sampled))
        logger.text(config_io.dump_yaml(best_config), "best_config.yaml")
        if local:
            text = config_io.dump_yaml(best_config).encode()
            atomic.write_file(Path(sweep.path) / "best_config.yaml", lambda handle: handle.write(text))
        logger.metrics({f"best_{sweep.space.spec.metric}": best[sweep.space.spec.metric]}, step=0)
        logger.tag("best_trial", str(best["trial"]))
        best_run = runs.find_run(sweep.tracking_uri, sweep.experiment,
                                 trial_run_tags(sweep.parent_run_id, str(best["trial"])))
        if best_run is not None:  # the best trial's MLflow model, also among the parent run's outputs
            runs.link_models(sweep.tracking_uri, best_run, sweep.parent_run_id)
    if shares:
        logger.metrics(shares, step=0)
    carried = relay.relay_carried_bytes(sweep.tracking_uri)  # files that crossed to the head as bytes
    if carried is not None:
        logger.metrics({"relay_artifact_bytes": float(carried)}, step=0)
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
    study = load_study(sweep.study_storage, sweep.name)
    if study is not None:  # the Optuna study, for optuna-dashboard, and Optuna's own plots
        log_study(logger, study, sweep.name, sweep.path, sweep.study_storage)
    return paths if local else []
