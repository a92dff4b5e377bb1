"""What a run keeps of its checkpoints, where, and for how long: one component, ``Retention``.

What is kept, how many (the config key), where, and until when:

* **resume checkpoints**, the whole state: the newest ``resume_checkpoints``, Ray Train's
  checkpoints in the run's storage path (``LocalHooks``: ``last.pt``); Ray deletes the oldest
  (``CheckpointConfig(num_to_keep=resume_kept(config))``);
* **the best checkpoint**, the whole state, by ``best_metric``: one, under ``best/`` in the run's
  kept location and in MLflow's ``best/``; the previous one stays until a report after the new
  best is registered, so a restarted run (which resumes from a registered checkpoint) still
  ends with the best of the whole run (``LocalHooks``, one process: ``best.pt``);
* **the last N weights**: ``average_last``, under ``last_checkpoints/`` (and MLflow's, at the
  run's end); the oldest beyond N go;
* **the best N weights**: ``keep_best``, under ``best_checkpoints/`` (and MLflow's); the worst
  beyond N go.

Weights are model weights only, so a window costs N model sizes, not N optimizer states.  Every
checkpoint a run reports (each validation, and every ``save_every`` updates) goes through
``Retention.checkpoint``; files are named by update (``update_00001200.pt``; a best one also
carries its score).  The kept location is a ``storage.Location`` (a local directory or
``s3://...``): a Ray Train run keeps it in its storage path beside Ray's own checkpoints, so a
restarted worker group finds what it left and forgets only what lies after the checkpoint it
resumes from (``Retention.resumed``).  fairseq's ``--keep-last-epochs``/``--keep-best-checkpoints``
and JoeyNMT's ``keep_best_ckpts`` decide the same in one place.

Imports torch and the storage layer (pyarrow.fs, for a remote location).
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import torch
from torch import Tensor

from platform.data.storage import Location
from platform.training.config import TrainConfig

LAST = "last_checkpoints"  # the directories (and MLflow artifact paths) of the kept weights
BEST = "best_checkpoints"
BEST_CHECKPOINT = "best"  # the best checkpoint itself (a whole one), by update, in the run's storage
LEGACY_LAST = "last_epochs"  # where runs kept their last epochs' weights before update checkpoints
_NAME = re.compile(r"(?:update|epoch)_(\d+)(?:_score_([-+0-9.e]+|nan|inf))?\.pt$")


def update_of(name: str) -> int | None:
    """The update (or, in a legacy file, the epoch) a kept weights file was saved at."""
    found = _NAME.search(name)
    return int(found.group(1)) if found else None


def score_of(name: str) -> float | None:
    found = _NAME.search(name)
    return float(found.group(2)) if found and found.group(2) is not None else None


def sorted_by_update(names: list[str]) -> list[str]:
    """Kept weights file names, oldest update first (other names left out)."""
    return sorted((name for name in names if update_of(name) is not None), key=update_of)


class KeptWeights:
    """The kept weights of one run under ``root``: ``last_checkpoints/`` (the newest ``last``
    checkpoints) and ``best_checkpoints/`` (the ``best`` best validations, by a score where a
    larger is better when ``mode`` is ``max``)."""

    def __init__(self, root: Location, last: int, best: int = 0, mode: str = "max"):
        self.root, self.last, self.best, self.mode = root, last, best, mode

    def keep(self, step: int, weights: dict[str, Tensor], score: float | None) -> None:
        """The weights of the checkpoint at update ``step`` (``score``: its validation's
        ``best_metric``, None for a checkpoint without validation); the oldest beyond the window
        and the worst beyond the best N are deleted."""
        if self.last > 0:
            _write(self.root.child(LAST).child(f"update_{step:08d}.pt"), step, weights)
            for name in self.names(LAST)[:-self.last]:
                self.root.child(LAST).child(name).delete()
        if self.best > 0 and score is not None and math.isfinite(score):  # a NaN score ranks nothing
            _write(self.root.child(BEST).child(f"update_{step:08d}_score_{score:.6g}.pt"), step, weights)
            ranked = sorted(self.names(BEST), key=lambda name: (-1 if self.mode == "max" else 1) * score_of(name))
            for name in ranked[self.best:]:  # stable: of equal scores the earlier update stays
                self.root.child(BEST).child(name).delete()

    def keep_best_checkpoint(self, step: int, data: bytes) -> None:
        """The new best checkpoint (``save_checkpoint``'s bytes) at update ``step``.  None goes
        here: the ones before stay until ``settle_best`` says a later best is in a registered
        Ray checkpoint (this one's may never be; a run resumes from the last registered one)."""
        self.root.child(BEST_CHECKPOINT).child(f"update_{step:08d}.pt").write_bytes_atomically(data)

    def settle_best(self, best_step: int) -> None:
        """Once a Ray checkpoint whose best was at ``best_step`` is registered (the worker reports
        it one report later): the best checkpoints older than ``best_step`` go."""
        for name in self.names(BEST_CHECKPOINT):
            if update_of(name) < best_step:
                self.root.child(BEST_CHECKPOINT).child(name).delete()

    def best_checkpoint(self) -> Location | None:
        """The newest best checkpoint kept (after ``forget_after``: the resumed run's best)."""
        names = self.names(BEST_CHECKPOINT)
        return self.root.child(BEST_CHECKPOINT).child(names[-1]) if names else None

    def forget_after(self, step: int) -> None:
        """Drop what was kept after update ``step`` (the checkpoint a restarted run resumes
        from): those updates are trained again, and kept again."""
        for kind in (LAST, BEST, BEST_CHECKPOINT):
            for name in self.names(kind):
                if update_of(name) > step:
                    self.root.child(kind).child(name).delete()

    def names(self, kind: str) -> list[str]:
        """The file names under ``kind`` (``LAST`` or ``BEST``), oldest update first."""
        return sorted_by_update(self.root.child(kind).list_names())

    def copy_to(self, directory: Path) -> dict[str, list[Path]]:
        """Local copies of every kept file, ``directory/KIND/NAME``, by kind (for MLflow)."""
        copies: dict[str, list[Path]] = {}
        for kind in (LAST, BEST):
            for name in self.names(kind):
                path = directory / kind / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(self.root.child(kind).child(name).read_bytes())
                copies.setdefault(kind, []).append(path)
        return copies


def _write(location: Location, step: int, weights: dict[str, Tensor]) -> None:
    buffer = io.BytesIO()
    torch.save({"update": step, "model": {name: value.detach().cpu() for name, value in weights.items()}}, buffer)
    location.write_bytes_atomically(buffer.getvalue())




def resume_kept(config: TrainConfig) -> int:
    """How many resume checkpoints Ray Train keeps in the run's storage (its ``num_to_keep``)."""
    return config.resume_checkpoints


class Retention:
    """One run's retention on rank 0, made once from the run's config: each report's
    checkpoint goes through ``checkpoint``, and ``registered`` once Ray has it."""

    def __init__(self, root: Location, config: TrainConfig):
        self.best_metric = config.best_metric
        self.kept = KeptWeights(root, config.average_last, config.keep_best, config.best_mode)
        self.pending_best: int | None = None  # the best update of the last report Ray registered

    def resumed(self, step: int) -> None:
        """The run resumes from the checkpoint at update ``step`` (0: from scratch): what was
        kept after it is trained, and kept, again."""
        self.kept.forget_after(step)

    def checkpoint(self, state: dict, metrics: dict[str, float], validated: bool, best: Path | None) -> None:
        """A report's checkpoint (``state``, before it goes to Ray): its weights into the last N
        and, validated, the best N by ``best_metric``; ``best``: the file of the whole checkpoint
        where the report is a new best."""
        step = int(state["progress"]["step"])
        score = metrics.get(self.best_metric) if validated else None
        self.kept.keep(step, state["model"], score)
        if best is not None:
            self.kept.keep_best_checkpoint(step, Path(best).read_bytes())

    def registered(self, state: dict) -> None:
        """Ray registered the report of ``state``: the report before it is registered too, so the
        best checkpoints older than that report's best go (settled one report behind)."""
        if self.pending_best is not None:
            self.kept.settle_best(self.pending_best)
        self.pending_best = int(state["progress"]["best_step"])

    def best_checkpoint(self) -> Location | None:
        return self.kept.best_checkpoint()

    def copy_to(self, directory: Path) -> dict[str, list[Path]]:
        return self.kept.copy_to(directory)
