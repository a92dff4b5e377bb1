"""Checkpoint averaging and kept weights: the last N checkpoints' weights, the best N, their mean.

Vaswani et al. 2017 §6.1 evaluate the base Transformer on "a single model obtained by averaging
the last 5 checkpoints" (the big one: 20), checkpoints written every 10 minutes; fairseq's
``scripts/average_checkpoints.py`` averages the last N update checkpoints and its
``--keep-best-checkpoints`` keeps the best N.  Here every checkpoint a run reports (each
validation, and every ``save_every`` updates) adds its model weights to ``KeptWeights``: the
newest ``average_last`` of them under ``last_checkpoints/`` and, of the validated ones, the
``keep_best`` best by ``best_metric`` under ``best_checkpoints/`` (weights only, so a window
costs N model sizes, not N optimizer states).  Files are named by update
(``update_00001200.pt``; a best one also carries its score), so a run counted in updates
averages its last update checkpoints, not its 2 or 3 epochs.

The files live in a ``storage.Location`` (a local directory or ``s3://...``): a Ray Train run
keeps them in its storage path beside Ray's own checkpoints, so a restarted worker group finds
the window it left and drops only what lies after the checkpoint it resumes from.  The run's best
checkpoint (a whole one) is kept there too (``best/``), the previous best until a later report,
so a restarted run ends with the best of the whole run.
``platform.evaluate --average-last N`` averages the newest N of them.

Imports torch and the storage layer (pyarrow.fs, for a remote window).
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import torch
from torch import Tensor

from platform.data.storage import Location

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


def kept_files(directory: Path) -> list[Path]:
    """The kept weights files in a local ``directory``, oldest update first."""
    names = sorted_by_update([path.name for path in Path(directory).glob("*.pt")])
    return [Path(directory) / name for name in names]


def kept_weights(path: Path) -> dict[str, Tensor]:
    """The model weights of one kept file (tensors only: ``weights_only``)."""
    return torch.load(Path(path), map_location="cpu", weights_only=True)["model"]


def average(weights: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """The element-wise mean of several state dicts of one model (floating-point tensors,
    accumulated in float64); other tensors (integer buffers) are taken from the last."""
    if not weights:
        raise ValueError("nothing to average")
    averaged = {}
    for name, last in weights[-1].items():
        if not torch.is_floating_point(last):
            averaged[name] = last.clone()
            continue
        total = torch.zeros_like(last, dtype=torch.float64)
        for state in weights:
            total += state[name].to(torch.float64)
        averaged[name] = (total / len(weights)).to(last.dtype)
    return averaged
