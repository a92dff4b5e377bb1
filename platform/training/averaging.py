"""Checkpoint averaging: the mean of the weights a run kept (``training.retention``).

Vaswani et al. 2017 §6.1 evaluate the base Transformer on "a single model obtained by averaging
the last 5 checkpoints" (the big one: 20), checkpoints written every 10 minutes; fairseq's
``scripts/average_checkpoints.py`` averages the last N update checkpoints.  A run keeps the
weights of its last ``average_last`` checkpoints (``training.retention``, by update, so a run
counted in updates averages its last update checkpoints, not its 2 or 3 epochs);
``platform.evaluate --average-last N`` averages the newest N of them.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from platform.training.retention import sorted_by_update


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
