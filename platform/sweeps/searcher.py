"""The sweep's searcher and scheduler, as the user chose them (``--search``, ``--scheduler`` or
the space file's ``search:`` section): an Optuna sampler through Ray's ``OptunaSearch``, its
study in an RDB storage from the first trial (``sweeps.study``), and one of Ray Tune's trial
schedulers.

    searcher   tpe (default) | random | grid | cmaes | qmc        Optuna's samplers, seeded
    scheduler  asha (default) | hyperband | median | none          Ray Tune's schedulers

``hyperband`` is Ray's asynchronous HyperBand (``AsyncHyperBandScheduler`` with one bracket per
HyperBand bracket, Li et al. 2020), not the synchronous ``HyperBandScheduler``: the synchronous
one pauses trials at each rung and restarts them later, which a trial that runs its own Ray
Train trainer does not survive cleanly, and Ray's own docs recommend the asynchronous one.

The searcher (``sweeps.optuna_search``) tells Optuna the trials the scheduler ended early as
PRUNED, and keeps the scheduler's state and the seed repeats' grouping across ``--resume``
(Ray saves and restores the searcher with the experiment, but not the scheduler: ray#30838).
``--seeds-per-config N`` wraps it in Ray's ``Repeater``: each sampled config trained with N
seeds, Optuna told their mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

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
                  storage=None, study_name: str | None = None, seeds_per_config: int = 1, first_points: bool = True):
    """The sweep's searcher over ``space`` (a ``sweeps.spaces.Space``): its first points (the
    papers' settings) first (not for ``grid``, which is the whole sweep), then the sampler of
    ``settings`` seeded with ``seed``; its study in ``storage`` (an Optuna ``BaseStorage``;
    None: in memory) as ``study_name``.  With ``scheduler`` the scheduler's state is saved and
    restored along with the searcher's; with ``seeds_per_config`` > 1 every config is repeated
    with that many seeds (the trial config's ``__trial_index__``).  Without ``first_points`` (a
    searcher whose saved state is restored next) the first points are not queued in the study
    again (Ray's OptunaSearch enqueues them there when it is made)."""
    from platform.sweeps.optuna_search import PruneAwareOptunaSearch, SeedRepeater  # Ray Tune: heavy

    settings = settings or SearchSettings()
    objectives = space.objectives
    several = len(objectives) > 1
    searcher = PruneAwareOptunaSearch(
        space=space.define_by_run,
        metric=[name for name, _ in objectives] if several else objectives[0][0],
        mode=[mode for _, mode in objectives] if several else objectives[0][1],
        points_to_evaluate=None if settings.searcher == "grid" or not first_points else (space.first_points() or None),
        sampler=make_sampler(settings, space, seed), storage=storage, study_name=study_name,
        max_iterations=max_iterations, scheduler=scheduler)
    if seeds_per_config > 1:
        return SeedRepeater(searcher, repeat=seeds_per_config, set_index=True)
    return searcher


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
