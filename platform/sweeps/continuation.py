"""Sweeps that go on: ``--extend SWEEP`` adds trials to a finished (or interrupted) sweep, and
``--warm-start-from SWEEP`` starts a new sweep whose searcher knows an earlier sweep's trials.

Extending: Ray Tune cannot add samples to an experiment it has finished, so each extension is
a Tune experiment of its own, ``SWEEP-extend-K`` beside ``SWEEP``, under the same MLflow parent
run and with the same Optuna study.  Its searcher is the one the previous experiment saved
(``Searcher.restore_from_dir``, Ray's public API): the sampler with its state (so a seeded
sampler does not propose its first points again), the trials it told the study, and, carried
in the searcher's state (``optuna_search``), the scheduler's rungs.  The sweep's summary, plots
and best config then cover the trials of every experiment.

Warm-starting: the earlier sweep's finished trials (COMPLETE and PRUNED) are added to the new
sweep's study with Optuna's ``Study.add_trials``, where its parameters fit the new space: each
is replayed through the new space's define-by-run function on an ``optuna.trial.FixedTrial``,
which refuses a missing parameter and warns of a value outside a distribution.  The samplers
(TPE, CMA-ES, ...) read them as their own history; the new sweep's first points still run.
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from platform.data.storage import locate
from platform.errors import UserError

EXTENSION = "-extend-"  # SWEEP-extend-1, SWEEP-extend-2, ...: the Tune experiments of an extended sweep


def experiment_name(name: str, extension: int) -> str:
    """The Tune experiment of a sweep's ``extension`` (0: the sweep's first experiment)."""
    return name if extension == 0 else f"{name}{EXTENSION}{extension}"


def under(storage_path: str, name: str) -> str:
    """``name`` inside the storage path, a URI's ``?options`` kept at its end."""
    base, mark, options = storage_path.partition("?")
    return f"{base.rstrip('/')}/{name}{mark}{options}"


def extensions(storage_path: str, name: str) -> int:
    """How many extensions the sweep ``name`` has had (the experiments Ray can restore)."""
    import ray.tune

    count = 0
    while ray.tune.Tuner.can_restore(under(storage_path, experiment_name(name, count + 1))):
        count += 1
    return count


def restore_searcher(searcher, experiment_path: str) -> None:
    """Put the searcher state that Tune saved in ``experiment_path`` (a directory or a URI)
    into ``searcher`` (built as the sweep builds it, with the scheduler to restore)."""
    location = locate(experiment_path)
    saved = sorted(name for name in location.list_names()
                   if name.startswith("searcher-state-") and name.endswith(".pkl"))
    if not saved:
        raise UserError(f"{location}: Ray Tune saved no searcher state there; nothing to extend")
    with tempfile.TemporaryDirectory(prefix="nmt-searcher-") as scratch:
        Path(scratch, saved[-1]).write_bytes(location.child(saved[-1]).read_bytes())
        searcher.restore_from_dir(scratch)


@dataclass(frozen=True)
class Carried:
    numbers: list[int]  # the source study's trial numbers carried
    finished: int  # the source study's COMPLETE and PRUNED trials
    source: str

    @property
    def carried(self) -> int:
        return len(self.numbers)

    def line(self) -> str:
        left = self.finished - self.carried
        which = f": its trials {', '.join(map(str, self.numbers))}" if self.numbers else ""
        return (f"warm start: carried {self.carried} of the {self.finished} finished trials of sweep {self.source} "
                f"into this sweep's study" + (f" ({left} outside this space)" if left else "") + which)


def same_objectives(source_objectives: str | None, space) -> None:
    """Refuse to carry the trials of a sweep that optimised other metrics (its parent run's
    ``objectives`` param, where it is known): a value carried must mean the same thing."""
    ours = ",".join(f"{metric}:{mode}" for metric, mode in space.objectives)
    if source_objectives is not None and source_objectives != ours:
        raise UserError(f"--warm-start-from: that sweep optimised {source_objectives}, this one {ours}")


def carry_trials(source, target, space) -> Carried:
    """Add the finished trials of the study ``source`` to the study ``target`` where they fit
    ``space`` (``sweeps.spaces.Space``), as ``Study.add_trials`` does: parameters replayed
    through the space, values, state and the values reported each epoch kept."""
    import optuna
    from optuna.trial import TrialState, create_trial

    if list(source.directions) != list(target.directions):
        raise UserError(f"--warm-start-from {source.study_name}: its objectives go "
                        f"{[d.name for d in source.directions]}, this sweep's {[d.name for d in target.directions]}")
    finished = source.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    carried = []
    for trial in finished:
        fixed = optuna.trial.FixedTrial(trial.params)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # FixedTrial warns of a value outside a distribution
                space.define_by_run(fixed)
        except (ValueError, UserWarning):
            continue
        carried.append(create_trial(
            state=trial.state, params=fixed.params, distributions=fixed.distributions,
            values=trial.values,  # a pruned one's: its last reported value, as Optuna keeps it
            intermediate_values=trial.intermediate_values,
            user_attrs={"warm_start_from": source.study_name, "warm_start_trial": trial.number}))
    target.add_trials(carried)
    return Carried([trial.user_attrs["warm_start_trial"] for trial in carried], len(finished), source.study_name)
