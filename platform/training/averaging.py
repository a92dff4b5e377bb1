"""Checkpoint averaging: the weights of the last N epochs, averaged element-wise.

Vaswani et al. 2017 §6.1 evaluate the base Transformer on "a single model obtained by averaging
the last 5 checkpoints" (the big one: 20); fairseq's ``scripts/average_checkpoints.py`` does the
same.  Training keeps the model weights of its last ``keep_last_epochs`` epochs (weights only,
so the window costs N model sizes, not N optimizer states) in a ``last_epochs`` directory;
``platform.evaluate --average-last N`` averages the newest N of them.  Our checkpoints are per
epoch, not per 10 minutes as in the paper.

Imports torch only.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import Tensor

from platform import atomic

LAST_EPOCHS = "last_epochs"  # the directory (and MLflow artifact path) of the kept weights
_NAME = re.compile(r"epoch_(\d+)\.pt$")


def keep_epoch(directory: Path, epoch: int, weights: dict[str, Tensor], keep: int) -> list[Path]:
    """Save ``epoch``'s model weights into ``directory`` and delete all but the newest ``keep``;
    returns the kept files, oldest first (none when ``keep`` is 0)."""
    if keep < 1:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    atomic.write_file(directory / f"epoch_{epoch:04d}.pt",
                      lambda handle: torch.save({"epoch": epoch, "model": weights}, handle))
    kept = epoch_files(directory)
    for old in kept[:-keep]:
        old.unlink()
    return kept[-keep:]


def epoch_files(directory: Path) -> list[Path]:
    """The kept weight files in ``directory``, oldest epoch first."""
    found = [path for path in Path(directory).glob("epoch_*.pt") if _NAME.search(path.name)]
    return sorted(found, key=lambda path: int(_NAME.search(path.name).group(1)))


def kept_weights(path: Path) -> dict[str, Tensor]:
    """The model weights of one file ``keep_epoch`` wrote (tensors only: ``weights_only``)."""
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
