"""A Ray Tune sweep: every trial is a function trainable that runs ``launch.driver.run`` (its
own ``TorchTrainer``, the Train V2 pattern) with its sampled knobs and seed; the searcher and
scheduler come from ``sweeps.searcher``, the live Optuna study's storage from ``sweeps.study``;
the sweep is an MLflow parent run with a child run per trial.

Knobs carry one name everywhere (``training.config.knob_name``): Optuna's and Tune's parameter
names, the summary table's columns and the trials' MLflow params.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from platform import compat
from platform.data.dataset import read_meta
from platform.errors import UserError
from platform.launch.cluster import DRIVER_CPU, placement_group_ids, release_orphaned_groups
from platform.launch.driver import Job, run
from platform.launch.worker import LAST_REPORT
from platform.redaction import redact
from platform.sweeps.continuation import experiment_name, restore_searcher, under
from platform.sweeps.searcher import SearchSettings, make_scheduler, make_searcher
from platform.sweeps.spaces import Space
from platform.sweeps.study import kept_url, load_study, open_storage
from platform.sweeps.trial_runs import trial_run_tags
from platform.tracking import runs, store
from platform.tracking import spool as outage
from platform.tracking.spool import replay_all, spool_root
from platform.training.config import load_train_config


@dataclass
class Sweep:
    name: str
    space: Space  # with its base config
    num_samples: int
    max_epochs: int
    seed: int
    job: Job  # every trial's, but for its run name and start time
    max_concurrent: int = 1
    parent_run_id: str = ""
    settings: SearchSettings = dataclasses.field(default_factory=SearchSettings)
    seeds_per_config: int = 1  # each sampled config trained with seeds seed, seed+1, ...
    time_budget_s: float | None = None  # the search ends cleanly after this much wall time
    study_storage: str = ""  # the live Optuna study's RDB URL
    searcher: Any = None  # this session's searcher, when it made it (not on --resume: Ray restores its own)
    extension: int = 0  # --extend: this session's Tune experiment is the sweep's extension K (sweeps.continuation)
    session_trials: int = 0  # of run_sweep's results, the last this many are this session's experiment's

    @property
    def experiment(self) -> str:
        return self.job.experiment

    @property
    def tracking_uri(self) -> str:
        return self.job.tracking_uri

    @property
    def path(self) -> str:
        """The sweep's directory: its first Tune experiment, console log, plots, best config."""
        return f"{self.job.storage_path.rstrip('/')}/{self.name}"

    @property
    def spool(self) -> str:
        """Where its runs keep what MLflow could not take (``tracking.spool``)."""
        return spool_root(str(self.job.storage_path))

    def experiment_path(self, extension: int | None = None) -> str:
        """The Tune experiment of ``extension`` (default: this session's)."""
        name = experiment_name(self.name, self.extension if extension is None else extension)
        return under(str(self.job.storage_path), name)


# ----------------------------------------------------------------------------- the trial


SEED_INDEX = "__trial_index__"  # Ray's Repeater: which of a config's seeds a trial trains


def trial_seed(base_seed: int, sampled: dict[str, Any]) -> int:
    """The training seed of a trial: the config's, plus its index among a config's repeats."""
    return base_seed + int(sampled.get(SEED_INDEX, 0))


@dataclass(frozen=True)
class TrialSetup:
    """What every trial of a sweep is given besides its sampled knobs (``ray.tune.with_parameters``)."""

    space: Space
    job: Job  # every trial's, but for its run name and start time
    sweep: str  # the sweep's name
    parent_run_id: str  # the sweep's MLflow parent run


def run_trial(sampled: dict[str, Any], setup: TrialSetup) -> None:
    """One Tune trial: resolve its config and train it with Ray Train (its own TorchTrainer)."""
    import ray.tune

    started_at = time.time()
    trial_id = ray.tune.get_context().get_trial_id()
    space = setup.space
    knobs = {k: v for k, v in sampled.items() if k != SEED_INDEX}
    data = space.trial_config(knobs)
    data["seed"] = trial_seed(int(data.get("seed", 1)), sampled)
    config = load_train_config(data)  # validated once, in the trial
    job = dataclasses.replace(setup.job, run_name=f"{setup.sweep}-{trial_id}", started_at=started_at)
    tags = {"trial_id": trial_id, "sweep": setup.sweep, "space": space.name, "recipe": space.recipe_of(knobs)}
    from platform.sweeps.callbacks import FinalAfterFit  # Ray Tune: heavy, in the trial only

    run(config, job, parent_run_id=setup.parent_run_id, tags=tags, callbacks=[FinalAfterFit()],
        reuse=trial_run_tags(setup.parent_run_id, trial_id), after_fit=report_last)


def report_last(result) -> None:
    """After the trainer's ``fit`` (and the trial's MLflow run) ended: the report after which
    training ended, held back by ``FinalAfterFit``, now goes to Tune (``result``: Ray Train's
    Result, whose metrics are rank 0's last checkpointed report)."""
    import ray.tune
    from ray.tune.integration.ray_train import CHECKPOINT_PATH_KEY

    if result is not None and result.metrics and result.metrics.get(LAST_REPORT):
        path = {CHECKPOINT_PATH_KEY: result.checkpoint.path} if result.checkpoint else {}
        ray.tune.report({**result.metrics, **path})


# ----------------------------------------------------------------------------- the sweep


def run_sweep(sweep: Sweep, resume: bool = False, callbacks: Sequence[Any] = (), verbose: bool = True) -> list:
    """Run (or resume) this session's Tune experiment of the sweep; returns the results (Tune's
    ``Result``s) of every trial of the sweep, earlier experiments' first (an extended sweep).
    ``callbacks`` are extra Tune callbacks (the quiet console); ``verbose`` keeps Tune's own
    console tables."""
    import ray.tune

    setup = TrialSetup(space=sweep.space, job=sweep.job, sweep=sweep.name, parent_run_id=sweep.parent_run_id)
    trainable = ray.tune.with_resources(ray.tune.with_parameters(run_trial, setup=setup), {"CPU": DRIVER_CPU})
    path = sweep.experiment_path()
    if resume and not ray.tune.Tuner.can_restore(path):
        raise UserError(f"nothing to resume at {path}")
    release_orphaned_groups()  # what an interrupted sweep's teardown left reserved (a trial slot each)
    replay_all(str(sweep.job.storage_path), sweep.tracking_uri)  # what earlier runs kept during an outage
    if sweep.study_storage:
        kept_url(sweep.study_storage)  # its password where the searcher Tune unpickles on --resume finds it
    # a trial resumed after its training had finished ends without a new report; Tune's strict
    # check would fail the whole sweep for it (its Optuna trial is closed by the searcher)
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    if resume:  # Tune restores the searcher (with ASHA's rungs) and the callbacks it saved
        tuner = ray.tune.Tuner.restore(path, trainable=trainable, resume_errored=True)
    else:
        tuner = _new_tuner(sweep, trainable, callbacks, verbose)
    before = placement_group_ids()
    results = tuner.fit()
    release_orphaned_groups(before=before)  # what trials stopped mid-start left reserved
    # what the trials' runs kept during an outage and the sweep's closings of them (once the
    # server is back), then the runs no trial closed
    outage.when_up(sweep.tracking_uri, lambda: replay_all(str(sweep.job.storage_path), sweep.tracking_uri),
                   "what the sweep's runs kept during an outage")
    outage.when_up(sweep.tracking_uri, lambda: end_stopped_trials(sweep, results), "the sweep's stopped trials")
    outage.when_up(sweep.tracking_uri, lambda: end_lost_trials(sweep.tracking_uri, sweep.experiment,
                                                               sweep.parent_run_id, compat.tune_trial_ids(results),
                                                               sweep.spool),
                   "the sweep's lost trials")
    earlier = [ray.tune.Tuner.restore(sweep.experiment_path(k), trainable=trainable).get_results()
               for k in range(sweep.extension)]
    sweep.session_trials = len(results)
    return [result for grid in [*earlier, results] for result in grid]


LOST = ("lost: the sweep's driver ended before Ray Tune had saved this trial, so the resumed "
        "sweep could not resume it (its searcher asked for another trial in its place)")


def end_lost_trials(tracking_uri: str, experiment: str, parent_run_id: str, known: set[str],
                    spool: str | None = None) -> list[str]:
    """Close the sweep's trial runs that no trial Tune knows (``known``: its trial ids) owns.
    The driver ended (a kill, a head restart) after a trial had opened its MLflow run but
    before Tune saved its experiment state with that trial, so the resumed Tune never knew
    it.  Left alone such a run stays RUNNING forever; closed FAILED with ``lost=true`` and
    why.  Returns their run ids."""
    lost = [child.info.run_id for child in runs.running_children(tracking_uri, experiment, parent_run_id)
            if child.data.tags.get("stage") != "confirm" and child.data.tags.get("trial_id") not in known]
    client = store.client(tracking_uri)
    for run_id in lost:
        client.set_tag(run_id, "lost", "true")
        runs.end_run(tracking_uri, run_id, error=LOST, spool=spool)
    return lost


def end_stopped_trials(sweep: Sweep, results) -> None:
    """Trials the time budget stopped: Tune ends the experiment without telling the searcher or
    the callbacks, so their MLflow runs would stay RUNNING (or be FAILED by the interrupted
    trial process) and their Optuna trials RUNNING.  Closed here: the runs FINISHED with
    ``pruned=true`` and ``stopped=time budget``, the study's running trials PRUNED (what they
    reported each epoch kept), or FAIL where a trial reported nothing (one the searcher asked
    for before a kill, which the resumed searcher's older state does not know)."""
    import optuna

    for result in results:
        trial_id = (result.metrics or {}).get("trial_id")
        if result.config is None or trial_id is None or result.error is not None:
            continue  # never started, or failed (closed as FAILED already)
        run_id = runs.find_run(sweep.tracking_uri, sweep.experiment, trial_run_tags(sweep.parent_run_id, trial_id))
        client = store.client(sweep.tracking_uri)
        run = client.get_run(run_id) if run_id is not None else None
        if run is not None and run.info.status != "FINISHED":  # RUNNING, or FAILED by its torn-down process
            if "error" in run.data.tags:
                client.delete_tag(run_id, "error")
            client.set_tag(run_id, "pruned", "true")
            client.set_tag(run_id, "stopped", "time budget" if sweep.time_budget_s else "sweep ended")
            runs.end_run(sweep.tracking_uri, run_id, spool=sweep.spool)
    study = load_study(sweep.study_storage, sweep.name)
    if study is not None:  # trained for a while: pruned; asked but never reported (lost to a kill): failed
        several = len(study.directions) > 1  # no intermediate values: stopped by the budget, or lost
        for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            trained = trial.intermediate_values or (several and sweep.time_budget_s)
            state = optuna.trial.TrialState.PRUNED if trained else optuna.trial.TrialState.FAIL
            study.tell(trial.number, state=state)


def _new_tuner(sweep: Sweep, trainable, callbacks: Sequence[Any], verbose: bool):
    import ray.tune  # Ray Tune: heavy, where a sweep runs

    from platform.sweeps.callbacks import CloseTrialRuns  # Ray Tune: heavy, where a sweep runs

    objectives = sweep.space.objectives
    # several objectives: Tune has no one metric, the scheduler takes the first; an extension's
    # scheduler gets its state back with its metric and mode set, which Tune refuses to set twice
    tell = len(objectives) == 1 and not sweep.extension
    scheduler = make_scheduler(sweep.settings, sweep.max_epochs, *((None, None) if tell else objectives[0]))
    sweep.searcher = make_searcher(sweep.space, sweep.seed, sweep.max_epochs, scheduler=scheduler,
                                   settings=sweep.settings, storage=open_storage(sweep.study_storage),
                                   study_name=sweep.name, seeds_per_config=sweep.seeds_per_config,
                                   first_points=not sweep.extension)
    if sweep.extension:  # the previous experiment's searcher (and with it the scheduler) as it ended
        restore_searcher(sweep.searcher, sweep.experiment_path(sweep.extension - 1))
    return ray.tune.Tuner(
        trainable,
        tune_config=ray.tune.TuneConfig(
            metric=objectives[0][0] if tell else None, mode=objectives[0][1] if tell else None,
            num_samples=sweep.num_samples, search_alg=sweep.searcher, scheduler=scheduler,
            max_concurrent_trials=sweep.max_concurrent, time_budget_s=sweep.time_budget_s),
        run_config=ray.tune.RunConfig(
            name=experiment_name(sweep.name, sweep.extension), storage_path=str(sweep.job.storage_path),
            verbose=None if verbose else 0,
            callbacks=[CloseTrialRuns(sweep.tracking_uri, sweep.experiment, sweep.parent_run_id,
                                                  sweep.max_epochs, sweep.spool),
                       *callbacks]),
    )


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
    params = {"space": sweep.space.name, "model": sweep.space.model, "num_samples": sweep.num_samples,
              **sweep.settings.params(sweep.seed, sweep.max_epochs), "metric": sweep.space.spec.metric,
              "objectives": ",".join(f"{m}:{d}" for m, d in sweep.space.objectives),
              "seeds_per_config": sweep.seeds_per_config, "time_budget_s": sweep.time_budget_s,
              "study_storage": redact(sweep.study_storage) if sweep.study_storage else "",
              "workers_per_trial": sweep.job.workers, "gpus_per_worker": sweep.job.gpus_per_worker,
              "max_concurrent": sweep.max_concurrent, "git_commit": sweep.job.git_commit}
    tags = {"sweep_parent": sweep.name, "space": sweep.space.name, "recipe": sweep.space.recipe}
    run_id = runs.start_run(sweep.tracking_uri, sweep.experiment, sweep.name, {k: str(v) for k, v in params.items()},
                            tags, sweep.space.text, source="platform.tune")
    dataset = sweep.job.dataset  # the runs table's Dataset column, as on the trials
    runs.log_dataset_inputs(sweep.tracking_uri, run_id, dataset.name, dataset.meta or read_meta(dataset.location))
    return run_id
