"""The sweep's searcher and scheduler, as the user chose them (``--search``, ``--scheduler`` or
the space file's ``search:`` section): an Optuna sampler through Ray's ``OptunaSearch``, its
study in an RDB storage from the first trial (``launch.study``), and one of Ray Tune's trial
schedulers.

    searcher   tpe (default) | random | grid | cmaes | qmc        Optuna's samplers, seeded
    scheduler  asha (default) | hyperband | median | none          Ray Tune's schedulers

``hyperband`` is Ray's asynchronous HyperBand (``AsyncHyperBandScheduler`` with one bracket per
HyperBand bracket, Li et al. 2020), not the synchronous ``HyperBandScheduler``: the synchronous
one pauses trials at each rung and restarts them later, which a trial that runs its own Ray
Train trainer does not survive cleanly, and Ray's own docs recommend the asynchronous one.

The searcher reads OptunaSearch's private trials (``platform.compat``, checked when the
searcher is built): trials ended early by the scheduler are told to Optuna as PRUNED (Ray tells
them COMPLETE with their early value, which biases TPE).

A scheduler's state is kept across ``--resume`` with its own public ``save``/``restore``,
carried inside the searcher's saved state (Ray saves and restores the searcher with the
experiment, but not the scheduler: ray#30838); the median rule has no ``save`` and starts
again from the restored trials' next results.  ``--seeds-per-config N`` wraps the searcher in
Ray's ``Repeater`` (each sampled config trained with N seeds, Optuna told their mean), whose
own grouping is carried the same way (Ray's ``Repeater.save`` keeps only the inner searcher's).
"""

from __future__ import annotations

import math
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from platform import compat
from platform.errors import ConfigError, UserError

SEARCHERS = ("tpe", "random", "grid", "cmaes", "qmc")
SCHEDULERS = ("asha", "hyperband", "median", "none")


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """How a sweep searches and stops trials: the space file's ``search:`` section, flags win."""

    searcher: Literal["tpe", "random", "grid", "cmaes", "qmc"] = "tpe"
    scheduler: Literal["asha", "hyperband", "median", "none"] = "asha"
    grace_period: int = 1  # epochs every trial runs before the scheduler may stop it
    reduction_factor: int = 2  # ASHA / HyperBand: 1 in this many trials goes on at each rung
    min_samples: int = 3  # the median rule: trials that must have reached an epoch to compare with
    max_epochs: int | None = None  # the most epochs a trial trains (the scheduler's max_t); --max-epochs wins

    def __post_init__(self) -> None:
        if self.grace_period < 1:
            raise ValueError("grace_period must be at least 1 epoch")
        if self.reduction_factor < 2:
            raise ValueError("reduction_factor must be at least 2")
        if self.min_samples < 1:
            raise ValueError("min_samples must be at least 1")
        if self.max_epochs is not None and self.max_epochs < 1:
            raise ValueError("max_epochs must be at least 1")

    def params(self, seed: int, max_epochs: int) -> dict[str, Any]:
        """How the sweep searched, as its parent run's params."""
        params: dict[str, Any] = {"searcher": f"optuna-{self.searcher}", "scheduler": self.scheduler,
                                  "seed": seed, "max_epochs": max_epochs}
        if self.scheduler != "none":
            params["grace_period"] = self.grace_period
        if self.scheduler in ("asha", "hyperband"):
            params["reduction_factor"] = self.reduction_factor
        if self.scheduler == "median":
            params["min_samples"] = self.min_samples
        return params


# ----------------------------------------------------------------------------- schedulers


def make_scheduler(settings: SearchSettings, max_epochs: int, metric: str | None = None, mode: str | None = None):
    """The trial scheduler on ``training_iteration`` (epochs), none beyond ``max_epochs``; with
    ``metric``/``mode`` for a multi-objective sweep (Tune then has no single metric to pass)."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule

    grace = min(settings.grace_period, max_epochs)
    if settings.scheduler == "none":
        return FIFOScheduler()
    if settings.scheduler == "median":
        return MedianStoppingRule(time_attr="training_iteration", metric=metric, mode=mode, grace_period=grace,
                                  min_samples_required=settings.min_samples)
    brackets = 1
    if settings.scheduler == "hyperband":  # HyperBand's s_max + 1 brackets (Li et al. 2018, Algorithm 1)
        brackets = max(1, int(math.log(max_epochs / grace) / math.log(settings.reduction_factor) + 1e-9) + 1)
    return ASHAScheduler(time_attr="training_iteration", metric=metric, mode=mode, max_t=max_epochs,
                         grace_period=grace, reduction_factor=settings.reduction_factor, brackets=brackets)


def _scheduler_bytes(scheduler) -> bytes | None:
    """The scheduler's state through its own ``save`` (a file), as bytes the searcher carries;
    None for a scheduler without one."""
    with tempfile.TemporaryDirectory(prefix="nmt-scheduler-") as directory:
        path = Path(directory) / "scheduler.pkl"
        try:
            scheduler.save(str(path))
        except NotImplementedError:
            return None
        return path.read_bytes()


def _restore_scheduler(scheduler, state: bytes) -> None:
    """Put a saved scheduler state back with the scheduler's own ``restore``."""
    with tempfile.TemporaryDirectory(prefix="nmt-scheduler-") as directory:
        path = Path(directory) / "scheduler.pkl"
        path.write_bytes(state)
        scheduler.restore(str(path))


# ----------------------------------------------------------------------------- samplers


def make_sampler(settings: SearchSettings, space, seed: int):
    """The Optuna sampler ``settings.searcher`` names, seeded with ``seed``."""
    import optuna

    samplers = optuna.samplers
    if settings.searcher == "grid":
        return samplers.GridSampler(space.grid(), seed=seed)
    if settings.searcher == "random":
        return samplers.RandomSampler(seed=seed)
    if settings.searcher == "cmaes":  # categorical knobs: sampled independently (at random)
        return samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if settings.searcher == "qmc":
        return samplers.QMCSampler(seed=seed, warn_independent_sampling=False)
    return samplers.TPESampler(seed=seed)


def make_searcher(space, seed: int, max_iterations: int, scheduler=None, settings: SearchSettings | None = None,
                  storage=None, study_name: str | None = None, seeds_per_config: int = 1):
    """The sweep's searcher over ``space`` (a ``launch.spaces.Space``): its first points (the
    papers' settings) first (not for ``grid``, which is the whole sweep), then the sampler of
    ``settings`` seeded with ``seed``; its study in ``storage`` (an Optuna ``BaseStorage``;
    None: in memory) as ``study_name``.  With ``scheduler`` the scheduler's state is saved and
    restored along with the searcher's; with ``seeds_per_config`` > 1 every config is repeated
    with that many seeds (the trial config's ``__trial_index__``)."""
    from ray.tune.search import Repeater
    from ray.tune.search.optuna import OptunaSearch

    settings = settings or SearchSettings()

    class PruneAwareOptunaSearch(OptunaSearch):
        """OptunaSearch that tells trials ended early by the scheduler as PRUNED.

        A trial that finishes without error before ``max_iterations`` epochs was stopped by
        the scheduler (sweeps run without patience) or by the sweep's time budget; Optuna's
        TPE treats pruned trials by their intermediate values."""

        def __init__(self, *args, max_iterations: int, scheduler=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.max_iterations = max_iterations
            self.scheduler = scheduler
            self.repeater_state = None
            compat.check_searcher(self)

        def save(self, checkpoint_path: str) -> None:
            scheduler = self.__dict__.pop("scheduler", None)
            self.scheduler_state = _scheduler_bytes(scheduler) if scheduler is not None else None
            try:
                super().save(checkpoint_path)
            finally:
                self.scheduler = scheduler

        def restore(self, checkpoint_path: str) -> None:
            scheduler, epochs = self.__dict__.get("scheduler"), self.max_iterations
            super().restore(checkpoint_path)
            self.scheduler = scheduler
            if self.max_iterations != epochs:
                raise UserError(f"the sweep was saved with {self.max_iterations} max epochs, not {epochs}: "
                                f"resume it with --max-epochs {self.max_iterations}")
            saved = self.__dict__.get("scheduler_state")
            if scheduler is not None and saved is not None:
                _restore_scheduler(scheduler, saved)

        def _told_already(self, trial_id: str) -> bool:
            """Whether the study (a live storage) finished this trial before a resume restored
            an older searcher state: a trial told PRUNED, then resumed by Ray from its
            checkpoint, must not be reported to again (Optuna refuses to update it)."""
            trial = compat.optuna_trials(self).get(trial_id)
            if trial is None or trial_id in compat.completed_trials(self):
                return False
            if not compat.optuna_study(self).get_trials(deepcopy=False)[trial.number].state.is_finished():
                return False
            compat.completed_trials(self).add(trial_id)  # Optuna keeps its first verdict
            return True

        def on_trial_result(self, trial_id: str, result: dict) -> None:
            if not self._told_already(trial_id):
                super().on_trial_result(trial_id, result)

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
            from optuna.trial import TrialState

            if self._told_already(trial_id):
                return
            stopped_early = (not error and result is not None and "training_iteration" in result
                             and result["training_iteration"] < self.max_iterations)
            if not stopped_early or trial_id in compat.completed_trials(self):
                return super().on_trial_complete(trial_id, result, error)
            trial = compat.optuna_trials(self)[trial_id]
            study = compat.optuna_study(self)
            if self.metric in result and len(study.directions) == 1:
                # Tune passes the result that made the scheduler stop the trial here, not to
                # on_trial_result: Optuna keeps it as the pruned trial's last intermediate value
                # (what TPE weighs); a step already reported is ignored (Optuna's warning silenced)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    trial.report(result[self.metric], result["training_iteration"])
            study.tell(trial, state=TrialState.PRUNED)
            compat.completed_trials(self).add(trial_id)

    class SeedRepeater(Repeater):
        """Ray's Repeater whose trial groups survive ``--resume``: they travel in the inner
        searcher's saved state (Ray's ``Repeater.save`` writes only the inner searcher)."""

        def save(self, checkpoint_path: str) -> None:
            self.searcher.repeater_state = self.get_state()
            try:
                super().save(checkpoint_path)
            finally:
                self.searcher.repeater_state = None

        def restore(self, checkpoint_path: str) -> None:
            super().restore(checkpoint_path)
            state = self.searcher.__dict__.get("repeater_state")
            if state is not None:
                self.set_state(state)
                self.searcher.repeater_state = None

    objectives = space.objectives
    metric = [name for name, _ in objectives] if len(objectives) > 1 else objectives[0][0]
    mode = [direction for _, direction in objectives] if len(objectives) > 1 else objectives[0][1]
    searcher = PruneAwareOptunaSearch(
        space=space.define_by_run, metric=metric, mode=mode,
        points_to_evaluate=None if settings.searcher == "grid" else (space.first_points() or None),
        sampler=make_sampler(settings, space, seed), storage=storage, study_name=study_name,
        max_iterations=max_iterations, scheduler=scheduler)
    if seeds_per_config > 1:
        return SeedRepeater(searcher, repeat=seeds_per_config, set_index=True)
    return searcher


def optuna_search(searcher):
    """The OptunaSearch inside ``searcher`` (itself, or the one a Repeater wraps)."""
    return getattr(searcher, "searcher", searcher)


def study_of(searcher):
    """The Optuna study a live searcher samples from."""
    return compat.optuna_study(optuna_search(searcher))


def grid_size(space) -> int:
    """How many points the grid of ``space`` has."""
    return math.prod(len(values) for values in space.grid().values())


def check_settings(settings: SearchSettings, space, num_samples: int | None) -> None:
    """Refuse what cannot run, before Ray starts: a grid over a knob without grid values."""
    if settings.searcher == "grid":
        space.grid()  # raises ConfigError naming the knob
    if len(space.objectives) > 1 and settings.searcher in ("cmaes", "qmc", "grid"):
        raise ConfigError(f"--search {settings.searcher}: a multi-objective sweep needs tpe or random")
    if num_samples is not None and num_samples < 1:
        raise UserError("--num-trials must be at least 1")


def saved_state(sweep_path: str):
    """What Ray saved with the experiment in the sweep's local directory: the searcher's Optuna
    study and the scheduler with its state (None where the searcher carried none); (None, None)
    for URI storage or where nothing was saved."""
    if "://" in sweep_path or not Path(sweep_path).is_dir():
        return None, None
    from ray.tune.search.optuna import OptunaSearch

    saved = OptunaSearch()
    try:
        saved.restore_from_dir(sweep_path)
    except RuntimeError:  # none saved there
        return None, None
    scheduler = None
    if getattr(saved, "scheduler_state", None) is not None:
        scheduler = make_scheduler(SearchSettings(), 1)  # its settings come back with its state
        _restore_scheduler(scheduler, saved.scheduler_state)
    return compat.optuna_study(saved), scheduler


def rungs(scheduler) -> dict[int, set[str]]:
    """ASHA's first bracket: {milestone epoch: the trial ids recorded there}."""
    return {int(milestone): set(recorded) for milestone, recorded in compat.asha_rungs(scheduler)}
