"""Ray's ``OptunaSearch`` and ``Repeater`` as a sweep runs them (``sweeps.searcher`` builds them).

``PruneAwareOptunaSearch`` tells Optuna the trials the scheduler ended early as PRUNED (Ray
tells them COMPLETE with their early value, which biases TPE), reading OptunaSearch's private
trials through ``platform.compat``.  It also carries, in its saved state, what Ray saves with
the experiment for the searcher only: the scheduler's state (through the scheduler's own
``save``/``restore``; the median rule has none and starts again from the restored trials' next
results) and ``SeedRepeater``'s grouping of a config's seeds (Ray's ``Repeater.save`` writes only
the inner searcher), so both survive ``--resume``.

Imported only where a searcher is built: it imports Ray Tune's Optuna integration.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from ray.tune.search import Repeater
from ray.tune.search.optuna import OptunaSearch

from platform import compat
from platform.errors import UserError
from platform.training.stopping import trial_status


def scheduler_bytes(scheduler) -> bytes | None:
    """The scheduler's state through its own ``save`` (a file), as bytes the searcher carries;
    None for a scheduler without one."""
    with tempfile.TemporaryDirectory(prefix="nmt-scheduler-") as directory:
        path = Path(directory) / "scheduler.pkl"
        try:
            scheduler.save(str(path))
        except NotImplementedError:
            return None
        return path.read_bytes()


def restore_scheduler(scheduler, state: bytes) -> None:
    """Put a saved scheduler state back with the scheduler's own ``restore``."""
    with tempfile.TemporaryDirectory(prefix="nmt-scheduler-") as directory:
        path = Path(directory) / "scheduler.pkl"
        path.write_bytes(state)
        scheduler.restore(str(path))


class PruneAwareOptunaSearch(OptunaSearch):
    """OptunaSearch that tells trials ended early by the scheduler as PRUNED.

    A trial that finishes without error before ``max_iterations`` epochs was stopped by the
    scheduler or by the sweep's time budget, unless it stopped itself early (its patience:
    ``STOPPED_EARLY`` in its last result), which is complete; Optuna's TPE treats pruned trials by
    their intermediate values."""

    def __init__(self, *args, max_iterations: int, scheduler=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_iterations = max_iterations
        self.scheduler = scheduler
        self.repeater_state = None
        compat.check_searcher(self)

    def save(self, checkpoint_path: str) -> None:
        scheduler = self.__dict__.pop("scheduler", None)
        self.scheduler_state = scheduler_bytes(scheduler) if scheduler is not None else None
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
            restore_scheduler(scheduler, saved)

    def _told_already(self, trial_id: str) -> bool:
        """Whether the study (a live storage) finished this trial before a resume restored an
        older searcher state: a trial told PRUNED, then resumed by Ray from its checkpoint,
        must not be reported to again (Optuna refuses to update it)."""
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
        pruned = (not error and result is not None and "training_iteration" in result
                  and trial_status(result, self.max_iterations) == "PRUNED")
        if not pruned or trial_id in compat.completed_trials(self):
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
