"""``python -m platform.tune``: a hyper-parameter sweep with Ray Tune + Optuna + ASHA, tracked in MLflow.

    python -m platform.tune --space dbsa                       # demo corpus, CPU-sized sweep
    python -m platform.tune --space deprel --data data/ja-en --num-samples 32 --workers-per-trial 2 --gpus-per-worker 1
    python -m platform.tune --space dbsa --name my-sweep --resume
    python -m platform.tune --space hier --dry-run
    python -m platform.tune --space dbsa --search random --scheduler none --time-budget 2h --confirm 2
    python -m platform.tune --space papers --search grid --seeds-per-config 3

Each trial is a Tune function trainable that builds its own Ray Train ``TorchTrainer`` (the
Train V2 pattern) and forwards rank 0's metrics through Ray's ``TuneReportCallback`` (the last
one once the trainer has shut down, so it withdraws its request to the autoscaler); its trainer run
is named after the trial id, so a retried trial resumes its own checkpoints.  ``OptunaSearch``
(``--search``: TPE by default, seeded) samples the space, the space's first points (the papers'
settings) first, its study live in an RDB storage (``optuna-dashboard`` opens it while the sweep
runs); ``--scheduler`` (ASHA by default) stops weak trials per epoch, and those are told to
Optuna as PRUNED (Ray would tell them COMPLETE with their early value, which biases TPE).  With
``--confirm K`` the K best configs and the space's baseline are trained again with several
seeds and scored on test (``launch.confirm``).  The sweep is an MLflow parent run; every trial
and confirmation run a child run.  Run from the repository root.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from platform import config as config_io
from platform.data.encode import resolve_dataset
from platform.errors import UserError, run_cli
from platform.launch import reach
from platform.launch.cluster import (
    auto_gpus_per_worker,
    cluster_gpus,
    default_storage_path,
    max_concurrent_trials,
    start_ray,
    storage_uri,
)
from platform.launch.confirm import confirmation_lines, run_confirmation
from platform.launch.console import console_log_path, make_console, quiet_logging
from platform.launch.driver import Job
from platform.launch.searcher import SCHEDULERS, SEARCHERS, SearchSettings, check_settings, grid_size
from platform.launch.spaces import Space, load_space
from platform.launch.study import default_storage_url, shown_url
from platform.launch.summary import closing_lines, log_summary, no_trial_finished, summarize, time_line, time_shares
from platform.launch.sweep import Sweep, existing_sweep, parent_run, run_sweep
from platform.tracking import runs
from platform.tracking.store import resolve_tracking_uri, start_relay
from platform.tracking.tables import format_table
from platform.training.config import load_train_config

# ----------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    from search_spaces import SPACES

    parser = argparse.ArgumentParser(prog="python -m platform.tune", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--space", required=True, help=f"search space: {', '.join(SPACES)}, or a space .yaml file")
    parser.add_argument("--data", default="demo", help="'demo' (the built-in synthetic corpus), 'demo-large' (its harder version) or a prepared dataset directory")
    parser.add_argument("--num-trials", "--num-samples", dest="num_trials", type=int,
                        help="configs to sample (default 6; smoke 3; grid: the whole grid); each is trained "
                             "--seeds-per-config times")
    parser.add_argument("--max-epochs", type=int, help="epochs of a trial that the scheduler never stops (default 4; smoke 2)")
    parser.add_argument("--search", choices=SEARCHERS, help="Optuna sampler (default tpe, or the space's search.searcher)")
    parser.add_argument("--scheduler", choices=SCHEDULERS,
                        help="trial scheduler (default asha, or the space's search.scheduler); none trains every trial to the end")
    parser.add_argument("--grace-period", type=int, help="epochs before the scheduler may stop a trial (default 1)")
    parser.add_argument("--reduction-factor", type=int, help="asha/hyperband: 1 in this many trials goes on per rung (default 2)")
    parser.add_argument("--min-samples", type=int, help="median: trials needed at an epoch to compare with (default 3)")
    parser.add_argument("--objective", action="append", default=[], metavar="METRIC:MODE",
                        help="an objective (repeatable; several make a multi-objective sweep), e.g. "
                             "--objective dev_bleu:max --objective num_parameters:min")
    parser.add_argument("--seeds-per-config", type=int, default=1,
                        help="train each sampled config with this many seeds (Optuna gets their mean; default 1)")
    parser.add_argument("--time-budget", type=parse_duration, metavar="DURATION",
                        help="wall clock for the search (e.g. 90m, 2h, 3600): then it ends cleanly with its summary")
    parser.add_argument("--confirm", type=int, default=0, metavar="K",
                        help="after the search, train the K best configs and the space's baseline again with "
                             "--confirm-seeds seeds each, score them on test, and test them against the baseline")
    parser.add_argument("--confirm-seeds", type=int, default=3, help="seeds per confirmed config (default 3)")
    parser.add_argument("--study-storage", metavar="URL",
                        help="the Optuna study's RDB storage (a SQLAlchemy URL; default sqlite:///runs/NAME/optuna.db)")
    parser.add_argument("--size", choices=["sweep", "cpu", "paper"], default="sweep",
                        help="trial defaults: sweep (small models, 200-step epochs; the default), cpu, paper")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a config value for every trial, e.g. --set model.d_model=256 (repeatable)")
    parser.add_argument("--workers-per-trial", type=int, default=1, help="DDP workers of each trial (default 1)")
    parser.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs per worker (default 1)")
    parser.add_argument("--gpus-per-worker", type=float,
                        help="GPUs per worker (default: none on a cluster without GPUs; else 1 at --size paper and "
                             "1/8 for the smaller sizes, eight trials sharing a GPU)")
    parser.add_argument("--max-concurrent", type=int, help="at most this many trials at once (default: what fits)")
    parser.add_argument("--name", help="sweep name; with --resume, the sweep to continue")
    parser.add_argument("--resume", action="store_true", help="continue the interrupted sweep --name")
    parser.add_argument("--seed", type=int, default=1, help="the Optuna sampler's seed (default 1)")
    parser.add_argument("--smoke", action="store_true", help="3 tiny trials of 2 short epochs, for a quick check")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved space and one sampled config, then exit")
    parser.add_argument("--experiment", default="syntax-nmt", help="MLflow experiment (default syntax-nmt)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)")
    parser.add_argument("--storage-path", default=default_storage_path(),
                        help="Ray Tune/Train storage: a directory or s3://... (shared storage on a cluster; default "
                             "$NMT_STORAGE_PATH, else runs)")
    parser.add_argument("--address", help="Ray cluster address (default: start a local one, or 'auto')")
    parser.add_argument("--verbose", action="store_true",
                        help="also show Ray's own console (its tables, warnings and workers' lines); "
                             "by default they go to console.log in the sweep's directory")
    return parser


def parse_duration(text: str) -> float:
    """``90m``, ``2h``, ``45s``, ``1.5h`` or plain seconds → seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:
        seconds = float(number) * unit
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90m, 2h, 3600)") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"a time budget must be positive, not {text!r}")
    return seconds


def search_settings(args, space: Space) -> SearchSettings:
    """The space file's ``search:`` section with the flags given on top."""
    given = {"searcher": args.search, "scheduler": args.scheduler, "grace_period": args.grace_period,
             "reduction_factor": args.reduction_factor, "min_samples": args.min_samples}
    try:
        return dataclasses.replace(space.spec.search, **{k: v for k, v in given.items() if v is not None})
    except ValueError as error:
        raise UserError(str(error)) from None


def dry_run(space: Space, seed: int) -> None:
    print(f"space {space.name} (model {space.model}, " + ", ".join(f"{mode} {metric}" for metric, mode in space.objectives) + ")")
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
    print(config_io.dump_yaml(load_train_config(space.trial_config(sampled))), end="")


def main(argv: Sequence[str] | None = None) -> int:
    launched_at = time.time()
    args = build_parser().parse_args(argv)
    size = "smoke" if args.smoke else args.size
    max_epochs = args.max_epochs or (2 if args.smoke else None)
    space = load_space(args.space, size, args.overrides, max_epochs)
    if args.objective:
        space = space.with_objectives(args.objective)
    settings = search_settings(args, space)
    check_settings(settings, space, args.num_trials)
    if args.seeds_per_config < 1 or args.confirm < 0 or args.confirm_seeds < 1:
        raise UserError("--seeds-per-config and --confirm-seeds must be at least 1, --confirm at least 0")
    if args.dry_run:
        dry_run(space, args.seed)
        return 0
    if args.resume and not args.name:
        raise UserError("--resume needs the --name of the sweep to continue")
    name = args.name or f"{Path(args.space).stem}-{uuid.uuid4().hex[:8]}"
    tracking_uri = resolve_tracking_uri(args.tracking_uri)  # before any work (no console.log, no demo corpus)
    existing_sweep(tracking_uri, args.experiment, name, args.resume)  # a taken name: refused before Ray starts
    storage = storage_uri(args.storage_path)
    study_storage = args.study_storage or default_storage_url(f"{storage.rstrip('/')}/{name}", name)
    log_file = None if args.verbose else quiet_logging(console_log_path(storage, name))
    dataset_dir = resolve_dataset(args.data)
    start_ray(args.address, num_cpus=(os.cpu_count() or 1) + 1,  # a local cluster leaves one CPU for trial drivers
              log_to_driver=args.verbose)
    gpus = args.gpus_per_worker
    if gpus is None:
        gpus = auto_gpus_per_worker(cluster_gpus(joined=args.address is not None), size)
    job = Job(dataset=reach.for_every_node(dataset_dir, storage), workers=args.workers_per_trial,
              gpus_per_worker=gpus, cpus_per_worker=args.cpus_per_worker, experiment=args.experiment,
              tracking_uri=tracking_uri, run_name="", storage_path=storage, max_failures=1,
              git_commit=runs.git_commit())  # each trial's with its run name and start time
    concurrent = max_concurrent_trials(args.workers_per_trial, args.cpus_per_worker, gpus,
                                       requested=args.max_concurrent, joined=args.address is not None)
    configs = args.num_trials or (grid_size(space) if settings.searcher == "grid" else (3 if args.smoke else 6))
    sweep = Sweep(name=name, space=space, num_samples=configs * args.seeds_per_config,
                  max_epochs=load_train_config(space.base).max_epochs, seed=args.seed, job=job,
                  max_concurrent=concurrent, settings=settings, seeds_per_config=args.seeds_per_config,
                  time_budget_s=args.time_budget, study_storage=study_storage)
    start_relay(tracking_uri)
    sweep.parent_run_id = parent_run(sweep, args.resume)
    print(f"sweep {name}: {sweep.num_samples} trials of {space.model} ({settings.searcher}, {settings.scheduler}), "
          f"up to {sweep.max_concurrent} at once, MLflow parent run {sweep.parent_run_id}"
          + (f", {gpus:g} GPU per worker" if gpus else "") + (f"; Ray's own output: {log_file}" if log_file else ""),
          flush=True)
    print(f"Optuna study: optuna-dashboard {shown_url(study_storage)}", flush=True)
    console = [] if args.verbose else [make_console(space.knobs, space.spec.metric, sweep.max_epochs)]
    began = time.time()
    try:
        results = run_sweep(sweep, resume=args.resume, callbacks=console, verbose=args.verbose)
        rows = summarize(results, sweep)
        shares = time_shares(results, launched_at, time.time() - began, sweep.max_concurrent)
        plots = log_summary(sweep, rows, results, shares)
        failure = no_trial_finished(rows, results)
        confirmed = None
        if args.confirm and not failure:
            print()
            print(format_table(rows))
            print(f"confirming the {args.confirm} best config(s) and the baseline with {args.confirm_seeds} seeds each, on test",
                  flush=True)
            confirmed = run_confirmation(sweep, rows, args.confirm, args.confirm_seeds, resume=args.resume,
                                         verbose=args.verbose)
    except BaseException as error:
        runs.end_run(tracking_uri, sweep.parent_run_id, error=error)
        raise
    runs.end_run(tracking_uri, sweep.parent_run_id, error=failure)
    if confirmed is None:
        print()
        print(format_table(rows))
    print(time_line(shares, sweep.max_concurrent))
    if failure:
        raise UserError(failure)
    print(closing_lines(sweep, rows, plots))
    if confirmed is not None:
        print(confirmation_lines(confirmed))
    return 0


if __name__ == "__main__":
    run_cli(main)
