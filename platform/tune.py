"""``python -m platform.tune``: a hyper-parameter sweep with Ray Tune + Optuna + ASHA, tracked in MLflow.

    python -m platform.tune --space dbsa                       # demo corpus, CPU-sized sweep
    python -m platform.tune --space deprel --data data/ja-en --num-samples 32 --workers-per-trial 2 --gpus-per-worker 1
    python -m platform.tune --space dbsa --name my-sweep --resume
    python -m platform.tune --space hier --dry-run

Each trial is a Tune function trainable that builds its own Ray Train ``TorchTrainer`` (the
Train V2 pattern) and forwards rank 0's metrics through ``TuneReportCallback``; its trainer run
is named after the trial id, so a retried trial resumes its own checkpoints.  ``OptunaSearch``
(TPE, seeded) samples the space, the space's first points (the papers' settings) first;
``ASHAScheduler`` stops weak trials on ``dev_bleu`` per epoch, and those are told to Optuna as
PRUNED (Ray would tell them COMPLETE with their early value, which biases TPE).  The sweep is an
MLflow parent run; every trial a child run tagged ``trial_id``.  Run from the repository root.
"""

from __future__ import annotations

import argparse
import copy
import csv
import io
import math
import os
import sys
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platform import config as config_io
from platform import tracking
from platform.errors import UserError, run_cli
from platform.spaces import Space, load_space, space_path
from platform.training import RUN_PRESETS, load_train_config, model_defaults

DRIVER_CPU = 0.1  # what each trial's function trainable (the trainer's driver) reserves


# ----------------------------------------------------------------------------- the searcher


def make_searcher(space: Space, seed: int, max_iterations: int):
    from ray.tune.search.optuna import OptunaSearch

    class PruneAwareOptunaSearch(OptunaSearch):
        """OptunaSearch that tells trials ended early by the scheduler as PRUNED.

        A trial that finishes without error before ``max_iterations`` epochs was stopped by
        ASHA (sweeps run without patience); Ray would report it COMPLETE with its early,
        low value.  Optuna's TPE treats pruned trials by their intermediate values instead."""

        def __init__(self, *args, max_iterations: int, **kwargs):
            super().__init__(*args, **kwargs)
            self.max_iterations = max_iterations

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
            from optuna.trial import TrialState

            stopped_early = (not error and result is not None
                             and result.get("training_iteration", 0) < self.max_iterations)
            if not stopped_early or trial_id in self._completed_trials:
                return super().on_trial_complete(trial_id, result, error)
            self._ot_study.tell(self._ot_trials[trial_id], state=TrialState.PRUNED)
            self._completed_trials.add(trial_id)

    return PruneAwareOptunaSearch(space=space.define_by_run, metric=space.spec.metric, mode=space.spec.mode,
                                  points_to_evaluate=space.first_points(), seed=seed, max_iterations=max_iterations)


# ----------------------------------------------------------------------------- the trial


def run_trial(sampled: dict[str, Any], setup: dict[str, Any]) -> None:
    """One Tune trial: resolve its config and train it with Ray Train (its own TorchTrainer)."""
    import ray.tune
    from ray.tune.integration.ray_train import TuneReportCallback

    from platform import train

    trial_id = ray.tune.get_context().get_trial_id()
    space = setup["space"]
    config = load_train_config(space.trial_config(setup["base"], sampled))
    job = train.Job(**{**setup["job"], "run_name": f"{setup['sweep']}-{trial_id}"})
    tags = {"trial_id": trial_id, "sweep": setup["sweep"], "space": space.name}
    train.run(config, job, parent_run_id=setup["parent_run_id"], tags=tags, callbacks=[TuneReportCallback()],
              reuse_tag="trial_id")


def _close_trial_runs_callback(tracking_uri: str, experiment: str, max_iterations: int):
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
            run_id = tracking.find_run(tracking_uri, experiment, {"trial_id": trial.trial_id})
            if run_id is None:
                return
            client = tracking.client(tracking_uri)
            run = client.get_run(run_id)
            epochs = int(trial.last_result.get("training_iteration", 0)) if trial.last_result else 0
            if error is None and epochs < max_iterations:
                client.set_tag(run_id, "pruned", "true")
            if error is None and run.info.status != "FINISHED":
                if "error" in run.data.tags:  # written by the interrupted trial process
                    client.delete_tag(run_id, "error")
                tracking.end_run(tracking_uri, run_id)
            elif run.info.status == "RUNNING":
                tracking.end_run(tracking_uri, run_id, error=error)

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
    job: dict[str, Any]  # platform.train.Job fields except run_name
    experiment: str
    tracking_uri: str
    storage_path: str
    max_concurrent: int = 1
    parent_run_id: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def path(self) -> str:
        return f"{self.storage_path.rstrip('/')}/{self.name}"


def max_concurrent_trials(workers: int, cpus_per_worker: float, gpus_per_worker: float) -> int:
    """How many trials the cluster fits at once: CPUs (and GPUs) over what one trial takes."""
    import ray

    resources = ray.cluster_resources()
    per_trial_cpu = workers * cpus_per_worker + DRIVER_CPU
    fits = math.floor(resources.get("CPU", 1) / per_trial_cpu + 1e-9)
    if gpus_per_worker > 0:
        fits = min(fits, math.floor(resources.get("GPU", 0) / (workers * gpus_per_worker) + 1e-9))
    if fits < 1:
        raise UserError(f"the cluster ({resources.get('CPU', 0)} CPUs, {resources.get('GPU', 0)} GPUs) cannot fit one "
                        f"trial of {workers} workers × {cpus_per_worker} CPUs / {gpus_per_worker} GPUs")
    return fits


def run_sweep(sweep: Sweep, resume: bool = False):
    """Run (or resume) the sweep; returns Tune's ResultGrid."""
    import ray.tune
    from ray.tune.schedulers import ASHAScheduler

    setup = {"space": sweep.space, "base": sweep.base, "job": sweep.job, "sweep": sweep.name,
             "parent_run_id": sweep.parent_run_id}
    trainable = ray.tune.with_resources(ray.tune.with_parameters(run_trial, setup=setup), {"CPU": DRIVER_CPU})
    if resume:
        if not ray.tune.Tuner.can_restore(str(sweep.path)):
            raise UserError(f"nothing to resume at {sweep.path}")
        tuner = ray.tune.Tuner.restore(str(sweep.path), trainable=trainable, resume_errored=True)
        return tuner.fit()
    scheduler = ASHAScheduler(time_attr="training_iteration", max_t=sweep.max_epochs, grace_period=1,
                              reduction_factor=2)
    tuner = ray.tune.Tuner(
        trainable,
        tune_config=ray.tune.TuneConfig(
            metric=sweep.space.spec.metric, mode=sweep.space.spec.mode, num_samples=sweep.num_samples,
            search_alg=make_searcher(sweep.space, sweep.seed, sweep.max_epochs), scheduler=scheduler,
            max_concurrent_trials=sweep.max_concurrent),
        run_config=ray.tune.RunConfig(
            name=sweep.name, storage_path=str(sweep.storage_path),
            callbacks=[_close_trial_runs_callback(sweep.tracking_uri, sweep.experiment, sweep.max_epochs)]),
    )
    return tuner.fit()


# ----------------------------------------------------------------------------- summary


SUMMARY_METRICS = ["dev_bleu", "dev_chrf", "dev_uas_enc", "dev_uas_dec"]


def summarize(results, sweep: Sweep) -> list[dict[str, Any]]:
    """One row per trial: knobs, best metrics over its epochs, epochs run, status."""
    rows = []
    for result in results:
        frame = result.metrics_dataframe
        metrics = result.metrics or {}
        trial_id = metrics.get("trial_id") or Path(result.path).name
        epochs = int(metrics.get("training_iteration", 0))
        status = "ERROR" if result.error else ("PRUNED" if epochs < sweep.max_epochs else "COMPLETE")
        row = {"trial": trial_id, **{k: result.config.get(k) for k in sweep.space.knobs}, "epochs": epochs, "status": status}
        for key in SUMMARY_METRICS:
            if frame is not None and key in frame:
                row[key] = float(frame[key].max())
        rows.append(row)
    metric = sweep.space.spec.metric
    rows.sort(key=lambda r: -r.get(metric, float("-inf")) if sweep.space.spec.mode == "max" else r.get(metric, float("inf")))
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table (also readable as plain text)."""
    if not rows:
        return "(no trials)"
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cell = lambda v: f"{v:.4g}" if isinstance(v, float) else ("" if v is None else str(v))  # noqa: E731
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def to_csv(rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def log_summary(sweep: Sweep, rows: list[dict[str, Any]], results) -> None:
    """Summary table, best config (re-runnable with platform.train --config) and plots on the parent."""
    from platform import plots

    logger = tracking.RunLogger(sweep.tracking_uri, sweep.parent_run_id, reopen=False)
    logger.text(format_table(rows) + "\n", "summary.md")
    logger.text(to_csv(rows), "summary.csv")
    best = next((row for row in rows if sweep.space.spec.metric in row), None)
    if best is not None:
        sampled = {k: best[k] for k in sweep.space.knobs if best.get(k) is not None}
        best_config = load_train_config(sweep.space.trial_config(sweep.base, sampled))
        logger.text(config_io.dump_yaml(best_config), "best_config.yaml")
        logger.metrics({f"best_{sweep.space.spec.metric}": best[sweep.space.spec.metric]}, step=0)
        logger.tag("best_trial", str(best["trial"]))
    histories = {}
    for result in results:
        frame = result.metrics_dataframe
        if frame is not None and "dev_bleu" in frame:
            histories[str((result.metrics or {}).get("trial_id"))] = list(frame["dev_bleu"])
    workdir = Path(tempfile.mkdtemp(prefix="sweep-summary-"))
    for path in plots.sweep_plots(rows, histories, sweep.space.knobs, sweep.space.spec.metric, workdir):
        logger.artifact(path, "plots")


# ----------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    from search_spaces import SPACES

    parser = argparse.ArgumentParser(prog="python -m platform.tune", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--space", required=True, help=f"search space: {', '.join(SPACES)}, or a space .yaml file")
    parser.add_argument("--data", default="demo", help="'demo' (built-in synthetic corpus) or a prepared dataset directory")
    parser.add_argument("--num-samples", type=int, help="trials to run (default 6; smoke 3)")
    parser.add_argument("--max-epochs", type=int, help="epochs of a trial that ASHA never stops (default 4; smoke 2)")
    parser.add_argument("--size", choices=["sweep", "cpu", "paper"], default="sweep",
                        help="trial defaults: sweep (small models, 100-step epochs; the default), cpu, paper")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a config value for every trial, e.g. --set model.d_model=256 (repeatable)")
    parser.add_argument("--workers-per-trial", type=int, default=1, help="DDP workers of each trial (default 1)")
    parser.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs per worker (default 1)")
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, help="GPUs per worker (default 0)")
    parser.add_argument("--max-concurrent", type=int, help="at most this many trials at once (default: what fits)")
    parser.add_argument("--name", help="sweep name; with --resume, the sweep to continue")
    parser.add_argument("--resume", action="store_true", help="continue the interrupted sweep --name")
    parser.add_argument("--seed", type=int, default=1, help="Optuna TPE seed (default 1)")
    parser.add_argument("--smoke", action="store_true", help="3 tiny trials of 2 short epochs, for a quick check")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved space and one sampled config, then exit")
    parser.add_argument("--experiment", default="syntax-nmt", help="MLflow experiment (default syntax-nmt)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)")
    parser.add_argument("--storage-path", default="runs", help="Ray Tune/Train storage (shared storage on a cluster)")
    parser.add_argument("--address", help="Ray cluster address (default: start a local one, or 'auto')")
    return parser


def base_config(space_name: str, size: str, overrides: Sequence[str], max_epochs: int | None) -> dict[str, Any]:
    raw = config_io.read_yaml_mapping(space_path(space_name))
    data: dict[str, Any] = {"model": model_defaults(str(raw.get("model")), size, raw.get("recipe")),
                            **copy.deepcopy(RUN_PRESETS[size])}
    for override in overrides:
        key, value = config_io.parse_override(override)
        from platform.train import _merge, _nested

        _merge(data, _nested(key, value))
    if max_epochs is not None:
        data["max_epochs"] = max_epochs
    data["patience"] = None  # ASHA decides; a trial ending early must mean "pruned"
    load_train_config(data)  # fail early on a bad --set
    return data


def dry_run(space: Space, base: dict[str, Any], seed: int) -> None:
    print(f"space {space.name} (model {space.spec.model}, {space.spec.mode} {space.spec.metric})")
    for key, dist in space.spec.params.items():
        low, high = space.bounds(key) if dist.type != "categorical" else (None, None)
        shape = f"one of {list(dist.choices)}" if dist.type == "categorical" else (
            f"{dist.type} in [{low}, {high}]" + (" (log)" if dist.log else ""))
        when = f"  when {dist.when}" if dist.when else ""
        print(f"  {key}: {shape}{when}")
    for key, value in space.spec.fixed.items():
        print(f"  {key} = {value} (fixed)")
    print(f"first points: {space.first_points()}")
    sampled = space.sample(seed)
    print(f"sampled: {sampled}")
    print(config_io.dump_yaml(load_train_config(space.trial_config(base, sampled))), end="")


def main(argv: Sequence[str] | None = None) -> int:
    from platform import train

    args = build_parser().parse_args(argv)
    size = "smoke" if args.smoke else args.size
    max_epochs = args.max_epochs or (2 if args.smoke else None)
    base = base_config(args.space, size, args.overrides, max_epochs)
    space = load_space(args.space, base)
    if args.dry_run:
        dry_run(space, base, args.seed)
        return 0
    if args.resume and not args.name:
        raise UserError("--resume needs the --name of the sweep to continue")
    tracking_uri = tracking.resolve_tracking_uri(args.tracking_uri)
    name = args.name or f"{Path(args.space).stem}-{uuid.uuid4().hex[:8]}"
    dataset_dir = train.resolve_data(args.data)
    _start_ray(args.address)
    job = {"dataset_dir": dataset_dir, "workers": args.workers_per_trial, "gpus_per_worker": args.gpus_per_worker,
           "cpus_per_worker": args.cpus_per_worker, "experiment": args.experiment, "tracking_uri": tracking_uri,
           "storage_path": train.storage_uri(args.storage_path), "max_failures": 1}
    fits = max_concurrent_trials(args.workers_per_trial, args.cpus_per_worker, args.gpus_per_worker)
    sweep = Sweep(name=name, space=space, base=base, num_samples=args.num_samples or (3 if args.smoke else 6),
                  max_epochs=base.get("max_epochs", 10), seed=args.seed, job=job, experiment=args.experiment,
                  tracking_uri=tracking_uri, storage_path=train.storage_uri(args.storage_path),
                  max_concurrent=min(args.max_concurrent or fits, fits))
    tracking.start_relay(tracking_uri)
    sweep.parent_run_id = _parent_run(sweep, args.resume)
    print(f"sweep {name}: {sweep.num_samples} trials of {space.spec.model}, up to {sweep.max_concurrent} at once, "
          f"MLflow parent run {sweep.parent_run_id}", file=sys.stderr)
    try:
        results = run_sweep(sweep, resume=args.resume)
        rows = summarize(results, sweep)
        log_summary(sweep, rows, results)
    except BaseException as error:
        tracking.end_run(tracking_uri, sweep.parent_run_id, error=error)
        raise
    tracking.end_run(tracking_uri, sweep.parent_run_id)
    print(format_table(rows))
    print(f"\nbest config: MLflow run {sweep.parent_run_id} artifact best_config.yaml "
          f"(python -m platform.train --model {space.spec.model} --config best_config.yaml)")
    return 0


def _start_ray(address: str | None) -> None:
    """A local cluster leaves one logical CPU for the trials' drivers (DRIVER_CPU each)."""
    import ray

    from platform.train import ray_init_kwargs

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return
    ray.init(**ray_init_kwargs(address, num_cpus=(os.cpu_count() or 1) + 1), logging_level="WARNING")


def _parent_run(sweep: Sweep, resume: bool) -> str:
    """The sweep's parent run: reopened on --resume (never a duplicate), else created."""
    if resume:
        run_id = tracking.find_run(sweep.tracking_uri, sweep.experiment, {"sweep_parent": sweep.name})
        if run_id is not None:
            tracking.client(sweep.tracking_uri).update_run(run_id, status="RUNNING")
            return run_id
    params = {"space": sweep.space.name, "model": sweep.space.spec.model, "num_samples": sweep.num_samples,
              "max_epochs": sweep.max_epochs, "seed": sweep.seed, "searcher": "optuna-tpe", "scheduler": "asha",
              "metric": sweep.space.spec.metric, "workers_per_trial": sweep.job["workers"],
              "gpus_per_worker": sweep.job["gpus_per_worker"], "max_concurrent": sweep.max_concurrent,
              "git_commit": tracking.git_commit()}
    space_text = space_path(sweep.space.name).read_text(encoding="utf-8")
    return tracking.start_run(sweep.tracking_uri, sweep.experiment, sweep.name, {k: str(v) for k, v in params.items()},
                              {"sweep_parent": sweep.name, "space": sweep.space.name}, space_text)


if __name__ == "__main__":
    run_cli(main)
