"""``trees``: the batched tree encoders against a per-sentence loop."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.speed.common import TREE_SPEEDUP_TARGET, Settings, _fmt, interleaved_seconds, median_ratio
from benchmarks.speed.models import random_trees
from models import build_model, default_config
from models.inputs import Source
from models.tree import BinaryTreeLSTMCell, TreeGRUCell, TreeSchedule, bottom_up, bottom_up_per_node

# ------------------------------------------------------------------------------ trees


def tree_contenders(settings: Settings) -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    """(batched, per-sentence) forward + backward of each tree encoder on random trees over
    sentences of 8–24 subwords: the bottom-up height schedule against ``bottom_up_per_node``,
    and the Gumbel tree-LSTM on the whole batch against one sentence at a time."""
    rng = random.Random(0)
    lengths = [rng.randint(8, 24) for _ in range(settings.tree_batch)]
    width, device, dim = max(lengths), settings.device, settings.tree_dim
    parent, length_tensor = random_trees(lengths).to(device), torch.tensor(lengths, device=device)
    torch.manual_seed(0)
    contenders = {}
    for name, cell in (("tree_gru", TreeGRUCell(dim)), ("tree_lstm", BinaryTreeLSTMCell(dim))):
        cell, leaves = cell.to(device), torch.randn(settings.tree_batch, width, dim, device=device, requires_grad=True)
        contenders[name] = (
            lambda cell=cell, leaves=leaves: bottom_up(leaves, TreeSchedule.from_parents(parent, length_tensor), cell,
                                                       width)[0].sum().backward(),
            lambda cell=cell, leaves=leaves: bottom_up_per_node(leaves, parent, length_tensor, cell).sum().backward())
    model = build_model(default_config("gumbel_tree", d_embed=dim, d_hidden=dim // 2, dropout=0.0), 8000, 8000)
    encoder = model.encoder.to(device).train()
    ids = torch.randint(4, 8000, (settings.tree_batch, width), device=device)

    def gumbel_looped():
        for b, n in enumerate(lengths):
            encoder(Source(ids=ids[b:b + 1, :n], lengths=length_tensor[b:b + 1])).states.sum().backward()

    contenders["gumbel_tree_lstm"] = (lambda: encoder(Source(ids=ids, lengths=length_tensor)).states.sum().backward(),
                                      gumbel_looped)
    return contenders


def bench_trees(settings: Settings) -> dict[str, Any]:
    results: dict[str, Any] = {"batch": settings.tree_batch, "dim": settings.tree_dim, "lengths": "8-24"}
    for name, (batched, looped) in tree_contenders(settings).items():
        seconds = interleaved_seconds({"batched": batched, "per_sentence": looped}, calls=1, rounds=settings.rounds,
                                      warmup=1, device=settings.device)
        speedup = median_ratio(seconds["per_sentence"], seconds["batched"])
        results[name] = {"batched_ms": 1e3 * statistics.median(seconds["batched"]),
                         "per_sentence_ms": 1e3 * statistics.median(seconds["per_sentence"]), "speedup": speedup,
                         "target": TREE_SPEEDUP_TARGET, "met": speedup >= TREE_SPEEDUP_TARGET}
    return results


def print_trees(result: dict[str, Any]) -> None:
    print(f"\ntree encoders, batch {result['batch']} (lengths {result['lengths']}), dim {result['dim']}, fwd+bwd")
    print(f"{'encoder':<20}{'batched ms':>12}{'per-sentence ms':>17}{'speed-up':>10}{'≥5x':>6}")
    for name, entry in result.items():
        if isinstance(entry, dict):
            print(f"{name:<20}{entry['batched_ms']:>12.1f}{entry['per_sentence_ms']:>17.1f}{entry['speedup']:>9.1f}x"
                  f"{_fmt(entry['met']):>6}")
