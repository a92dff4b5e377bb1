"""A whole sweep, as ``python -m platform.tune`` asks for it: the flags as a typed request
(``SweepRequest``) and ``tune``, which runs the stages in order:

1. the space with its search settings, checked before anything starts (``--dry-run`` stops
   here, after printing the space and one sampled config);
2. the set-up: the tracking store, the sweep's name and storage, Ray, every trial's job, the
   MLflow parent run;
3. the search (``sweeps.sweep``), then its summary on the parent run (``sweeps.summary``);
4. with ``--confirm K``, the confirmation on test (``sweeps.confirm``);
5. the parent run closed, and the closing lines.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platform import config_io
from platform.data.dataset import DatasetRef
from platform.errors import UserError
from platform.flags import DATA_HELP, TRACKING_URI_HELP, flag, parse_duration
from platform.launch import reach
from platform.launch.cluster import (
    auto_gpus_per_worker,
    cluster_gpus,
    default_storage_path,
    max_concurrent_trials,
    start_ray,
    storage_uri,
)
from platform.launch.driver import Job
from platform.redaction import redact
from platform.sweeps.confirm import Confirmation, confirmation_lines, run_confirmation
from platform.sweeps.console import console_log_path, quiet_logging
from platform.sweeps.continuation import Carried, carry_trials, extensions, same_objectives
from platform.sweeps.searcher import SCHEDULERS, SEARCHERS, SearchSettings, check_settings, grid_size
from platform.sweeps.spaces import Space, load_space
from platform.sweeps.study import default_storage_url, load_study, open_storage
from platform.sweeps.summary import (
    best_row,
    closing_lines,
    log_summary,
    no_trial_finished,
    summarize,
    time_line,
    time_shares,
)
from platform.sweeps.sweep import Sweep, existing_sweep, parent_run, run_sweep
from platform.sweeps.trial_runs import trial_run_tags
from platform.tracking import runs
from platform.tracking.registry import Registered, check_model_name, register
from platform.tracking.relay import held_relay
from platform.tracking.store import resolve_tracking_uri
from platform.tracking.tables import format_table
from platform.training.config import load_train_config
from search_spaces import SPACES

SMOKE_TRIALS, DEFAULT_TRIALS = 3, 6  # configs sampled without --num-trials
SMOKE_EPOCHS = 2


@dataclass(frozen=True, kw_only=True)
class SweepRequest:
    """What ``platform.tune`` is asked: each field is its flag (``flags.flag``), declared here only."""

    space: str = flag(f"search space: {', '.join(SPACES)}, or a space .yaml file")
    data: str = flag(DATA_HELP, default="demo")
    num_trials: int | None = flag("configs to sample (default 6; smoke 3; grid: the whole grid); each is trained "
                                  "--seeds-per-config times", default=None, names=("--num-trials", "--num-samples"))
    max_epochs: int | None = flag("epochs of a trial that the scheduler never stops (default 4; smoke 2)",
                                  default=None)
    # these five: None keeps the space file's search settings
    search: str | None = flag("Optuna sampler (default tpe, or the space's search.searcher)", default=None,
                              choices=SEARCHERS)
    scheduler: str | None = flag("trial scheduler (default asha, or the space's search.scheduler); none trains "
                                 "every trial to the end", default=None, choices=SCHEDULERS)
    grace_period: int | None = flag("epochs before the scheduler may stop a trial (default 1)", default=None)
    reduction_factor: int | None = flag("asha/hyperband: 1 in this many trials goes on per rung (default 2)",
                                        default=None)
    min_samples: int | None = flag("median: trials needed at an epoch to compare with (default 3)", default=None)
    objective: list[str] = flag("an objective (repeatable; several make a multi-objective sweep), e.g. "
                                "--objective dev_bleu:max --objective num_parameters:min", default_factory=list,
                                metavar="METRIC:MODE")
    seeds_per_config: int = flag("train each sampled config with this many seeds (Optuna gets their mean; "
                                 "default 1)", default=1)
    time_budget: float | None = flag("wall clock for the search (e.g. 90m, 2h, 3600): then it ends cleanly with "
                                     "its summary", default=None, metavar="DURATION", type=parse_duration)
    confirm: int = flag("after the search, train the K best configs and the space's baseline again with "
                        "--confirm-seeds seeds each, score them on test, and test them against the baseline",
                        default=0, metavar="K")
    confirm_seeds: int = flag("seeds per confirmed config (default 3)", default=3)
    register_model: str | None = flag("register the best trial's model (with --confirm: the confirmation's winner, "
                                      "the seed run with its best dev score) as a new version of NAME, with the "
                                      "alias 'champion'", default=None, metavar="NAME")
    study_storage: str | None = flag("the Optuna study's RDB storage (a SQLAlchemy URL; default "
                                     "$NMT_STUDY_STORAGE, else sqlite:///runs/NAME/optuna.db)", default=None,
                                     metavar="URL")
    size: str = flag("trial defaults: sweep (small models, 200-step epochs; the default), cpu, paper",
                     default="sweep", choices=["sweep", "cpu", "paper"])
    overrides: list[str] = flag("a config value for every trial, e.g. --set model.d_model=256 (repeatable)",
                                default_factory=list, names=("--set",), metavar="KEY=VALUE")
    workers_per_trial: int = flag("DDP workers of each trial (default 1)", default=1)
    cpus_per_worker: float = flag("CPUs per worker (default 1)", default=1.0)
    gpus_per_worker: float | None = flag("GPUs per worker (default: none on a cluster without GPUs; else 1 at "
                                         "--size paper and 1/8 for the smaller sizes, eight trials sharing a GPU)",
                                         default=None)
    max_concurrent: int | None = flag("at most this many trials at once (default: what fits)", default=None)
    name: str | None = flag("sweep name; with --resume, the sweep to continue", default=None)
    resume: bool = flag("continue the interrupted sweep --name (its latest experiment, an extension included)",
                        default=False)
    extend: str | None = flag("add --num-trials trials to the finished (or interrupted) sweep SWEEP: the same "
                              "study, parent run and searcher and scheduler as they ended; its summary covers all",
                              default=None, metavar="SWEEP")
    warm_start_from: str | None = flag("start this new sweep's searcher with the finished trials of sweep SWEEP "
                                       "(its study), where their parameters fit this space", default=None,
                                       metavar="SWEEP")
    seed: int = flag("the Optuna sampler's seed (default 1)", default=1)
    smoke: bool = flag("3 tiny trials of 2 short epochs, for a quick check", default=False)
    dry_run: bool = flag("print the resolved space and one sampled config, then exit", default=False)
    experiment: str = flag("MLflow experiment (default syntax-nmt)", default="syntax-nmt")
    tracking_uri: str | None = flag(TRACKING_URI_HELP, default=None)
    storage_path: str = flag("Ray Tune/Train storage: a directory or s3://... (shared storage on a cluster; "
                             "default $NMT_STORAGE_PATH, else runs)", default_factory=default_storage_path)
    address: str | None = flag("Ray cluster address (default: start a local one, or 'auto')", default=None)
    verbose: bool = flag("also show Ray's own console (its tables, warnings and workers' lines); by default they "
                         "go to console.log in the sweep's directory", default=False)
    launched_at: float = field(default_factory=time.time)  # the command's start, for the time shares

    @property
    def trial_size(self) -> str:
        return "smoke" if self.smoke else self.size


@dataclass
class Outcome:
    """What the search and the confirmation left: the summary rows, where the time went, the
    plots logged, why no trial finished (or None), and the confirmation table (or None)."""

    rows: list[dict[str, Any]]
    shares: dict[str, float]
    plots: list[Path]
    failure: str | None
    confirmed: Confirmation | None


def tune(request: SweepRequest) -> int:
    """Run the sweep ``request`` asks for (or print its dry run); returns the exit status."""
    space, settings = searched_space(request)
    if request.dry_run:
        dry_run(space, request.seed)
        return 0
    sweep, log_file = set_up(request, space, settings)
    with held_relay(sweep.tracking_uri):  # the MLflow relay of the trials lives as long as the command
        announce(sweep, log_file)
        outcome = search_and_confirm(sweep, request)
        print_outcome(sweep, outcome)
        if request.register_model:
            print(register_best(sweep, outcome, request.register_model).line())
    return 0


# ----------------------------------------------------------------------------- 1. the space


def searched_space(request: SweepRequest) -> tuple[Space, SearchSettings]:
    """The space at the trials' size with the request's overrides, and how to search it; what
    cannot run is refused here, before Ray starts."""
    max_epochs = request.max_epochs or (SMOKE_EPOCHS if request.smoke else None)
    space = load_space(request.space, request.trial_size, request.overrides, max_epochs)
    if request.objective:
        space = space.with_objectives(request.objective)
    settings = search_settings(request, space)
    check_settings(settings, space, request.num_trials)
    if request.register_model is not None:
        check_model_name(request.register_model)
    if request.seeds_per_config < 1 or request.confirm < 0 or request.confirm_seeds < 1:
        raise UserError("--seeds-per-config and --confirm-seeds must be at least 1, --confirm at least 0")
    return space, settings


def search_settings(request: SweepRequest, space: Space) -> SearchSettings:
    """The space file's ``search:`` section with the flags given on top."""
    given = {"searcher": request.search, "scheduler": request.scheduler, "grace_period": request.grace_period,
             "reduction_factor": request.reduction_factor, "min_samples": request.min_samples}
    try:
        return dataclasses.replace(space.spec.search, **{k: v for k, v in given.items() if v is not None})
    except ValueError as error:
        raise UserError(str(error)) from None


def dry_run(space: Space, seed: int) -> None:
    """Print the space's knobs, fixed values and first points, one sampled config, and the full
    config of a trial of it."""
    objectives = ", ".join(f"{mode} {metric}" for metric, mode in space.objectives)
    print(f"space {space.name} (model {space.model}, {objectives})")
    for key, dist in space.spec.params.items():
        if dist.type == "categorical":
            shape = f"one of {list(dist.choices)}"
        else:
            low, high = space.bounds(key)
            shape = f"{dist.type} in [{low}, {high}]" + (" (log)" if dist.log else "")
        when = f"  when {dist.when}" if dist.when else ""
        print(f"  {key}: {shape}{when}")
    for key, value in space.spec.fixed.items():
        print(f"  {key} = {value} (fixed)")
    print(f"first points: {space.first_points()}")
    sampled = space.sample(seed)
    print(f"sampled: {sampled}")
    print(config_io.dump_yaml(load_train_config(space.trial_config(sampled))), end="")


# ----------------------------------------------------------------------------- 2. the set-up


def set_up(request: SweepRequest, space: Space, settings: SearchSettings) -> tuple[Sweep, Path | None]:
    """Everything the first trial needs: a free name (or the sweep to resume), the tracking
    store, Ray's console (a log file unless ``--verbose``), the dataset every node reaches, Ray,
    and the MLflow parent run; returns the sweep and Ray's console log (None: on the terminal)."""
    check_continuation(request)
    name = request.extend or request.name or f"{Path(request.space).stem}-{uuid.uuid4().hex[:8]}"
    tracking_uri = resolve_tracking_uri(request.tracking_uri)  # before any work (no console.log, no demo corpus)
    earlier = existing_sweep(tracking_uri, request.experiment, name, request.resume or bool(request.extend))
    storage = storage_uri(request.storage_path)
    study_storage = request.study_storage or default_storage_url(f"{storage.rstrip('/')}/{name}", name)
    if request.extend:  # a taken name is refused before Ray; one to extend must exist, searched the same way
        check_extendable(tracking_uri, earlier, name, request, space, settings, study_storage)
    log_file = None if request.verbose else quiet_logging(console_log_path(storage, name))
    start_ray(request.address, num_cpus=(os.cpu_count() or 1) + 1,  # a local cluster leaves a CPU for trial drivers
              log_to_driver=request.verbose)
    shared = reach.storage_for_every_node(storage)  # before the demo corpus is prepared
    job = trial_job(request, reach.dataset_ref(request.data, storage, shared, space.base_config), storage,
                    tracking_uri)
    configs = request.num_trials or (grid_size(space) if settings.searcher == "grid"
                                     else SMOKE_TRIALS if request.smoke else DEFAULT_TRIALS)
    sweep = Sweep(name=name, space=space, num_samples=configs * request.seeds_per_config,
                  max_epochs=space.base_config.max_epochs, seed=request.seed, job=job,
                  max_concurrent=max_concurrent_trials(request.workers_per_trial, request.cpus_per_worker,
                                                       job.gpus_per_worker, requested=request.max_concurrent,
                                                       joined=request.address is not None),
                  settings=settings, seeds_per_config=request.seeds_per_config, time_budget_s=request.time_budget,
                  study_storage=study_storage)
    if request.resume or request.extend:  # --resume: the latest experiment; --extend: a new one after it
        sweep.extension = extensions(storage, name) + (1 if request.extend else 0)
    source = source_study(request, storage) if request.warm_start_from and not request.resume else None
    if source is not None:
        same_objectives(source_objectives(tracking_uri, request), space)
    if not (request.resume or request.extend):
        fresh_study(sweep)
    sweep.parent_run_id = parent_run(sweep, request.resume or bool(request.extend))
    if request.extend:
        runs.tag_run(tracking_uri, sweep.parent_run_id, {"extensions": str(sweep.extension)})
    if source is not None:
        carried = warm_start(sweep, source)
        print(carried.line(), flush=True)
        runs.tag_run(tracking_uri, sweep.parent_run_id, {"warm_start_from": request.warm_start_from,
                                                         "warm_start_trials": str(carried.carried)})
    return sweep, log_file


def fresh_study(sweep: Sweep) -> None:
    """A new sweep's study name is free in its storage: a shared one (the cluster's PostgreSQL)
    holds the studies of every experiment's sweeps, and a new sweep must not join another's."""
    if load_study(sweep.study_storage, sweep.name) is not None:
        raise UserError(f"an Optuna study named {sweep.name!r} exists in {redact(sweep.study_storage)} (a sweep "
                        "of another experiment?); choose another --name, or --resume or --extend that sweep")


def check_continuation(request: SweepRequest) -> None:
    """``--resume``, ``--extend`` and ``--warm-start-from`` as they can go together."""
    if request.resume and not request.name:
        raise UserError("--resume needs the --name of the sweep to continue")
    if request.extend:
        if request.resume or request.warm_start_from or (request.name and request.name != request.extend):
            raise UserError("--extend SWEEP adds trials to SWEEP itself: without --resume, --name or --warm-start-from")
        if not request.num_trials:
            raise UserError("--extend needs --num-trials: how many trials to add")
    if request.warm_start_from and request.warm_start_from == request.name:
        raise UserError("--warm-start-from names an earlier sweep; to add trials to a sweep, --extend it")


def check_extendable(tracking_uri: str, parent_run_id: str | None, name: str, request: SweepRequest,
                     space: Space, settings: SearchSettings, study_storage: str) -> None:
    """The sweep to extend exists in the experiment and was searched as this request would
    search it: its space, objectives, searcher, scheduler (the restored state is theirs), seeds
    per config, epochs and study storage, as its parent run's params recorded them."""
    if parent_run_id is None:
        raise UserError(f"--extend {name}: no sweep of that name in experiment {request.experiment!r}")
    ours = {"space": space.name, "seeds_per_config": request.seeds_per_config,
            "objectives": ",".join(f"{metric}:{mode}" for metric, mode in space.objectives),
            **settings.params(request.seed, space.base_config.max_epochs), "study_storage": redact(study_storage)}
    ours.pop("seed")  # the restored sampler goes on with its own state
    recorded = runs.run_params_of(tracking_uri, parent_run_id)
    differ = [f"{key} {recorded[key]} (not {value})" for key, value in ours.items()
              if key in recorded and recorded[key] != str(value)]
    if differ:
        raise UserError(f"--extend {name}: that sweep ran with {', '.join(differ)}; give the same flags")


def source_study(request: SweepRequest, storage: str):
    """The study of the sweep ``--warm-start-from`` names: in ``--study-storage`` (or
    ``$NMT_STUDY_STORAGE``) where given, else beside that sweep."""
    source = request.warm_start_from
    url = request.study_storage or default_storage_url(f"{storage.rstrip('/')}/{source}", source)
    study = load_study(url, source)
    if study is None:
        raise UserError(f"--warm-start-from {source}: no Optuna study of that sweep in {redact(url)}")
    return study


def source_objectives(tracking_uri: str, request: SweepRequest) -> str | None:
    """What the sweep ``--warm-start-from`` names optimised, where its parent run is in this
    experiment (None: unknown)."""
    parent = runs.find_run(tracking_uri, request.experiment, {"sweep_parent": request.warm_start_from})
    return runs.run_param(tracking_uri, parent, "objectives") if parent else None


def warm_start(sweep: Sweep, source) -> Carried:
    """The new sweep's study, made now with its objectives' directions, holding the source's
    trials that fit its space (``sweeps.continuation.carry_trials``)."""
    import optuna

    directions = ["maximize" if mode == "max" else "minimize" for _, mode in sweep.space.objectives]
    target = optuna.create_study(study_name=sweep.name, storage=open_storage(sweep.study_storage),
                                 directions=directions, load_if_exists=True)
    return carry_trials(source, target, sweep.space)


def trial_job(request: SweepRequest, dataset: DatasetRef, storage: str, tracking_uri: str) -> Job:
    """Every trial's job (each trial sets its run name and start time); GPUs per worker as
    asked, else as the cluster and the trials' size suggest."""
    gpus = request.gpus_per_worker
    if gpus is None:
        gpus = auto_gpus_per_worker(cluster_gpus(joined=request.address is not None), request.trial_size)
    return Job(dataset=dataset, workers=request.workers_per_trial,
               gpus_per_worker=gpus, cpus_per_worker=request.cpus_per_worker, experiment=request.experiment,
               tracking_uri=tracking_uri, run_name="", storage_path=storage, max_failures=1,
               git_commit=runs.git_commit())


def announce(sweep: Sweep, log_file: Path | None) -> None:
    """The sweep's first lines: what it runs, where its parent run and its live study are."""
    gpus = sweep.job.gpus_per_worker
    extended = f", extension {sweep.extension}" if sweep.extension else ""
    print(f"sweep {sweep.name}{extended}: {sweep.num_samples} trials of {sweep.space.model} "
          f"({sweep.settings.searcher}, "
          f"{sweep.settings.scheduler}), up to {sweep.max_concurrent} at once, MLflow parent run "
          f"{sweep.parent_run_id}" + (f", {gpus:g} GPU per worker" if gpus else "")
          + (f"; Ray's own output: {log_file}" if log_file else ""), flush=True)
    print(f"Optuna study: optuna-dashboard {redact(sweep.study_storage)}", flush=True)


# ----------------------------------------------------------------------------- 3-5. search, confirm, close


def search_and_confirm(sweep: Sweep, request: SweepRequest) -> Outcome:
    """Search, summarise on the parent run, confirm on test if asked, and close the parent run:
    FAILED with the error if anything raised (or no trial finished), else FINISHED."""
    from platform.sweeps.callbacks import SweepConsole  # Ray Tune: heavy, where a sweep runs

    console = [] if request.verbose else [SweepConsole(sweep.space.knobs, sweep.space.spec.metric, sweep.max_epochs)]
    began = time.time()
    try:
        results = run_sweep(sweep, resume=request.resume, callbacks=console, verbose=request.verbose)
        rows = summarize(results, sweep)
        shares = time_shares(results, request.launched_at, time.time() - began, sweep.max_concurrent)
        plots = log_summary(sweep, rows, results, shares)
        session = results[len(results) - sweep.session_trials:]  # an extension: its own trials must finish
        failure = no_trial_finished(summarize(session, sweep), session)
        confirmed = confirm(sweep, rows, request) if request.confirm and not failure else None
    except BaseException as error:
        runs.end_run(sweep.tracking_uri, sweep.parent_run_id, error=error)
        raise
    runs.end_run(sweep.tracking_uri, sweep.parent_run_id, error=failure)
    return Outcome(rows, shares, plots, failure, confirmed)


def confirm(sweep: Sweep, rows: list[dict[str, Any]], request: SweepRequest) -> Confirmation:
    """The search's table, then the confirmation of its ``--confirm`` best configs on test."""
    print()
    print(format_table(rows))
    print(f"confirming the {request.confirm} best config(s) and the baseline with {request.confirm_seeds} "
          "seeds each, on test", flush=True)
    return run_confirmation(sweep, rows, request.confirm, request.confirm_seeds, resume=request.resume,
                            verbose=request.verbose)


def register_best(sweep: Sweep, outcome: Outcome, name: str) -> Registered:
    """The sweep's model in the registry: the confirmation's winner where there was one, else the
    best trial's run."""
    if outcome.confirmed is not None:
        print(outcome.confirmed.winner_line())
        run_id = outcome.confirmed.winner_run_id
    else:
        best = best_row(outcome.rows, sweep.space.spec.metric)
        run_id = best and runs.find_run(sweep.tracking_uri, sweep.experiment,
                                        trial_run_tags(sweep.parent_run_id, str(best["trial"])))
    if not run_id:
        raise UserError(f"--register-model {name}: no trial's run to register")
    return register(sweep.tracking_uri, run_id, name, "platform.tune")


def print_outcome(sweep: Sweep, outcome: Outcome) -> None:
    """The summary table (unless the confirmation printed it), where the time went, and the
    closing lines; a sweep in which no trial finished is a user error."""
    if outcome.confirmed is None:
        print()
        print(format_table(outcome.rows))
    print(time_line(outcome.shares, sweep.max_concurrent))
    if outcome.failure:
        raise UserError(outcome.failure)
    print(closing_lines(sweep, outcome.rows, outcome.plots))
    if outcome.confirmed is not None:
        print(confirmation_lines(outcome.confirmed))
