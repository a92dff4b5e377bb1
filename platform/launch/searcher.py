"""The sweep's searcher and scheduler: Optuna's TPE through Ray's ``OptunaSearch``, and ASHA.

The searcher reads OptunaSearch's private study and trials (``platform.compat``, checked when
the searcher is built): pruned trials are told to Optuna as PRUNED (Ray tells them COMPLETE
with their early value, which biases TPE), and the study is read back for its export.

ASHA's rungs are kept across ``--resume`` with ASHA's own public ``save``/``restore``, carried
inside the searcher's saved state (Ray saves and restores the searcher with the experiment, but
not the scheduler: ray#30838).
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

from platform import compat
from platform.errors import UserError

GRACE_PERIOD = 1  # epochs every trial runs before ASHA may stop it
REDUCTION_FACTOR = 2  # 1 in 2 trials goes on at each rung


def make_scheduler(max_epochs: int):
    """ASHA on ``training_iteration`` (epochs), none beyond ``max_epochs``."""
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr="training_iteration", max_t=max_epochs, grace_period=GRACE_PERIOD,
                         reduction_factor=REDUCTION_FACTOR)


def make_searcher(space, seed: int, max_iterations: int, scheduler=None):
    """The sweep's searcher over ``space`` (a ``launch.spaces.Space``): its first points (the
    papers' settings) first, then TPE seeded with ``seed``; with ``scheduler`` (the sweep's
    ASHA) the scheduler's state is saved and restored along with the searcher's."""
    from ray.tune.search.optuna import OptunaSearch

    class PruneAwareOptunaSearch(OptunaSearch):
        """OptunaSearch that tells trials ended early by the scheduler as PRUNED.

        A trial that finishes without error before ``max_iterations`` epochs was stopped by
        ASHA (sweeps run without patience); Optuna's TPE treats pruned trials by their
        intermediate values."""

        def __init__(self, *args, max_iterations: int, scheduler=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.max_iterations = max_iterations
            self.scheduler = scheduler
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

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
            from optuna.trial import TrialState

            stopped_early = (not error and result is not None
                             and result.get("training_iteration", 0) < self.max_iterations)
            if not stopped_early or trial_id in compat.completed_trials(self):
                return super().on_trial_complete(trial_id, result, error)
            trial = compat.optuna_trials(self)[trial_id]
            if self.metric in result:
                # Tune passes the result that made ASHA stop the trial here, not to on_trial_result:
                # Optuna keeps it as the pruned trial's last intermediate value (what TPE weighs);
                # a step already reported is ignored (Optuna's warning silenced)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    trial.report(result[self.metric], result["training_iteration"])
            compat.optuna_study(self).tell(trial, state=TrialState.PRUNED)
            compat.completed_trials(self).add(trial_id)

    return PruneAwareOptunaSearch(space=space.define_by_run, metric=space.spec.metric, mode=space.spec.mode,
                                  points_to_evaluate=space.first_points(), seed=seed, max_iterations=max_iterations,
                                  scheduler=scheduler)


def _scheduler_bytes(scheduler) -> bytes:
    """The scheduler's state through its own ``save`` (a file), as bytes the searcher carries."""
    with tempfile.TemporaryDirectory(prefix="nmt-asha-") as directory:
        path = Path(directory) / "scheduler.pkl"
        scheduler.save(str(path))
        return path.read_bytes()


def _restore_scheduler(scheduler, state: bytes) -> None:
    """Put a saved scheduler state back with the scheduler's own ``restore``."""
    with tempfile.TemporaryDirectory(prefix="nmt-asha-") as directory:
        path = Path(directory) / "scheduler.pkl"
        path.write_bytes(state)
        scheduler.restore(str(path))


def study_of(searcher):
    """The Optuna study a live searcher samples from."""
    return compat.optuna_study(searcher)


def saved_state(sweep_path: str):
    """What Ray saved with the experiment in the sweep's local directory: the searcher's Optuna
    study and ASHA with its rungs (None where the searcher carried none); (None, None) for URI
    storage or where nothing was saved."""
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
        scheduler = make_scheduler(1)  # its settings come back with its state
        _restore_scheduler(scheduler, saved.scheduler_state)
    return compat.optuna_study(saved), scheduler


def rungs(scheduler) -> dict[int, set[str]]:
    """ASHA's first bracket: {milestone epoch: the trial ids recorded there}."""
    return {int(milestone): set(recorded) for milestone, recorded in compat.asha_rungs(scheduler)}


def search_params(seed: int, max_epochs: int) -> dict[str, Any]:
    """How the sweep searched, as its parent run's params."""
    return {"searcher": "optuna-tpe", "scheduler": "asha", "seed": seed, "max_epochs": max_epochs,
            "asha_grace_period": GRACE_PERIOD, "asha_reduction_factor": REDUCTION_FACTOR}
