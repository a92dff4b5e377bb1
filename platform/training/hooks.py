"""What the training loop's surroundings provide (``Hooks``): resuming, wrapping the model,
reporting with a checkpoint, progress.  What is kept of the checkpoints is decided by
``training.retention.Retention``, which the hooks hand every reported checkpoint.  ``LocalHooks`` runs the loop alone in
one process (tests, benchmarks); ``platform.launch.worker.RayHooks`` runs it under Ray Train."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from platform.atomic import owned_scratch
from platform.data.storage import locate
from platform.training.checkpoint import CHECKPOINT_FILE, load_checkpoint, save_checkpoint
from platform.training.config import TrainConfig
from platform.training.evaluate import Evaluation
from platform.training.retention import Retention


class Hooks:
    """What the surrounding system provides; the defaults run alone in one process."""

    def resume(self) -> dict | None:
        return None

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def report(self, metrics: dict[str, float], state: dict | None, evaluation: Evaluation | None, is_best: bool,
               final: bool = False) -> None:
        """A report's metrics (and, on rank 0, its checkpoint state): at each validation and
        ``save_every`` checkpoint; ``final``: the training's last report (at its limit, or early
        stopping), so the end-of-run work belongs before it is reported."""

    def progress(self, metrics: dict[str, float], step: int) -> None:
        """Rank 0, every ``log_every`` updates: the train metrics of those updates."""

    def diverged(self, reason: str) -> None:
        """Training stops for good with ``reason`` (the loss became NaN/inf)."""


@dataclass
class LocalHooks(Hooks):
    """Keeps checkpoints in a directory (``last.pt``: the one resume checkpoint, ``best.pt``),
    the reported metrics and the progress metrics (with their update), and what the run's
    ``config`` keeps besides (``training.retention``: under the directory)."""

    directory: Path
    config: TrainConfig
    reported: list[dict[str, float]] = field(default_factory=list)
    progressed: list[tuple[int, dict[str, float]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.retention = Retention(locate(self.directory), self.config)

    def progress(self, metrics, step) -> None:
        self.progressed.append((step, metrics))

    def resume(self) -> dict | None:
        last = Path(self.directory) / "last.pt"
        if not last.exists():
            return None
        state = load_checkpoint(last)
        self.retention.resumed(state["progress"]["step"])
        return state

    def report(self, metrics, state, evaluation, is_best, final=False) -> None:
        self.reported.append(metrics)
        if state is not None:
            # the windows of weights; the best checkpoint is best.pt itself (one process: no
            # restarted worker group looks for it in the run's storage)
            self.retention.checkpoint(state, metrics, evaluation is not None, None)
            save_checkpoint(state, Path(self.directory) / "last.pt")
            if is_best:
                save_checkpoint(state, Path(self.directory) / "best.pt")


@contextmanager
def temp_checkpoint(state: dict) -> Iterator[Path]:
    """``state`` saved in a temporary directory for as long as the block runs (Ray copies it to
    the run's storage in ``ray.train.report``); removed after, so no epoch's copy stays behind."""
    directory = owned_scratch("nmt-ckpt-")  # one a kill left behind is removed by the next checkpoint's
    try:
        save_checkpoint(state, directory / CHECKPOINT_FILE)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
