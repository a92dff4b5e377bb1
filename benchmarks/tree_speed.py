"""Batched tree encoders against a per-sentence loop (torch + models/ only).

    python benchmarks/tree_speed.py [--batch 64] [--dim 256] [--device cpu]

* bottom-up tree-GRU / tree-LSTM over given trees: the height schedule (all nodes of one height
  of all sentences in one call) against ``bottom_up_per_node`` (one sentence, one node at a time);
* the Gumbel tree-LSTM: one call per merge step for all sentences against running the encoder
  on each sentence alone.

Forward + backward, random binary trees over sentences of 8-24 subwords.  Reports times and
the speed-up; ratios within one run are what to read.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models import build_model, default_config  # noqa: E402
from models.inputs import Source  # noqa: E402
from models.tree import BinaryTreeLSTMCell, TreeGRUCell, TreeSchedule, bottom_up, bottom_up_per_node  # noqa: E402


def random_trees(lengths: list[int], seed: int = 0) -> torch.Tensor:
    """Random binary trees (random adjacent merges) in the batch layout of Source.tree_parent."""
    rng = random.Random(seed)
    width = max(lengths)
    parents = torch.full((len(lengths), 2 * width - 1), -1)
    for b, n in enumerate(lengths):
        nodes = list(range(n))
        for step in range(n - 1):
            k = rng.randrange(len(nodes) - 1)
            parents[b, nodes[k]] = parents[b, nodes[k + 1]] = width + step
            nodes[k:k + 2] = [width + step]
    return parents


def timed(function, repeats: int) -> float:
    function()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    rng = random.Random(0)
    lengths = [rng.randint(8, 24) for _ in range(args.batch)]
    width = max(lengths)
    parent = random_trees(lengths).to(args.device)
    length_tensor = torch.tensor(lengths, device=args.device)
    print(f"batch {args.batch}, sentence lengths 8-24 (mean {sum(lengths) / len(lengths):.1f}), dim {args.dim}, "
          f"device {args.device}, threads {torch.get_num_threads()}")
    print(f"{'encoder':<28}{'batched ms':>12}{'per-sentence ms':>17}{'speed-up':>10}")
    for name, cell in (("bottom-up tree-GRU", TreeGRUCell(args.dim)), ("bottom-up tree-LSTM", BinaryTreeLSTMCell(args.dim))):
        cell = cell.to(args.device)
        leaves = torch.randn(args.batch, width, args.dim, device=args.device, requires_grad=True)

        def batched():
            schedule = TreeSchedule.from_parents(parent, length_tensor)
            states, _ = bottom_up(leaves, schedule, cell, width)
            states.sum().backward()

        def looped():
            bottom_up_per_node(leaves, parent, length_tensor, cell).sum().backward()

        fast, slow = timed(batched, args.repeats), timed(looped, args.repeats)
        print(f"{name:<28}{fast * 1e3:>12.1f}{slow * 1e3:>17.1f}{slow / fast:>9.1f}x")

    model = build_model(default_config("gumbel_tree", d_embed=args.dim, d_hidden=args.dim // 2, dropout=0.0), 8000, 8000)
    encoder = model.encoder.to(args.device).train()
    ids = torch.randint(4, 8000, (args.batch, width), device=args.device)
    src = Source(ids=ids, lengths=length_tensor)

    def gumbel_batched():
        encoder(src).states.sum().backward()

    def gumbel_looped():
        for b, n in enumerate(lengths):
            encoder(Source(ids=ids[b:b + 1, :n], lengths=length_tensor[b:b + 1])).states.sum().backward()

    fast, slow = timed(gumbel_batched, args.repeats), timed(gumbel_looped, args.repeats)
    print(f"{'Gumbel tree-LSTM (+leaves)':<28}{fast * 1e3:>12.1f}{slow * 1e3:>17.1f}{slow / fast:>9.1f}x")


if __name__ == "__main__":
    main()
