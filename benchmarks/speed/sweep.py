"""``sweep``: ``python -m platform.tune --smoke`` as a user runs it, timed from its launch."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.speed.common import ROOT, SKIPPED_NO_RAY, Settings, _fmt, ray_available

# ------------------------------------------------------------------------------ Ray: sweep overhead


def bench_sweep(settings: Settings) -> dict[str, Any]:
    """``python -m platform.tune --smoke`` as a user runs it, timed from its launch: when each
    trial's MLflow run opened and when its first training step began (the ``num_parameters``
    metric that ``launch.worker.RayHooks.wrap`` logs right before the first step)."""
    if not ray_available():
        return dict(SKIPPED_NO_RAY)
    from platform.data.builtin import resolve_dataset

    dataset_dir = resolve_dataset("demo", quiet=True)
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as scratch:
        uri, experiment = f"sqlite:///{scratch}/mlflow.db", "bench-sweep"
        command = [sys.executable, "-m", "platform.tune", "--space", "baseline", "--smoke", "--num-samples",
                   str(settings.sweep_samples), "--data", str(dataset_dir), "--experiment", experiment,
                   "--tracking-uri", uri, "--storage-path", f"{scratch}/runs", "--name", "bench-sweep"]
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": os.environ.get("RAY_USAGE_STATS_ENABLED", "0")}
        started = time.time()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        finished = time.time()
        if done.returncode != 0:
            return {"error": f"platform.tune exited {done.returncode}: {done.stderr.strip()[-1500:]}"}
        return sweep_timings(uri, experiment, started, finished)


def sweep_timings(tracking_uri: str, experiment: str, started: float, finished: float) -> dict[str, Any]:
    """Start-up times of a sweep's trials from its MLflow store (seconds; ``started`` = launch)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id]) if found else []
    trials = []
    for run in sorted((r for r in runs if "trial_id" in r.data.tags), key=lambda r: r.info.start_time):
        opened = run.info.start_time / 1e3
        ready = client.get_metric_history(run.info.run_id, "num_parameters")
        first_step = min(m.timestamp for m in ready) / 1e3 if ready else None
        trials.append({"trial": run.data.tags["trial_id"], "run_opened_s": opened - started,
                       "first_step_s": first_step - started if first_step else None,
                       "startup_s": first_step - opened if first_step else None,
                       "duration_s": (run.info.end_time - run.info.start_time) / 1e3 if run.info.end_time else None})
    firsts = [t["first_step_s"] for t in trials if t["first_step_s"] is not None]
    startups = [t["startup_s"] for t in trials if t["startup_s"] is not None]
    return {"num_trials": len(trials), "tune_start_to_first_step_s": min(firsts) if firsts else None,
            "tune_start_to_first_trial_run_s": min((t["run_opened_s"] for t in trials), default=None),
            "median_trial_startup_s": statistics.median(startups) if startups else None,
            "sweep_wall_s": finished - started, "trials": trials}


def print_sweep(result: dict[str, Any]) -> None:
    print(f"\nsweep overhead (python -m platform.tune --smoke, {result['num_trials']} trials, "
          f"{result['sweep_wall_s']:.0f} s in all)")
    print(f"tune start → first training step: {_fmt(result['tune_start_to_first_step_s'], '.1f')} s; "
          f"median trial start-up (run opened → first step): {_fmt(result['median_trial_startup_s'], '.1f')} s")
