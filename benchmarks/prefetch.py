"""Does collating batches in a thread (``batching.prefetch``) cost or buy training speed?

Trains the same model on the same batches (``training.loop.fit``, one process, no validation
but at the end) with ``prefetch`` 0 (collation on the training thread) and 2 (a thread collates
2 updates ahead), alternating, and prints the wall time of each run, their speed ratio and the
share of time spent waiting for batches (``data_wait_share``, of the last report's window)::

    python -m benchmarks.prefetch --data data/demo --model transformer --updates 200 --rounds 3
    python -m benchmarks.prefetch --data data/tanaka --model hier_tree_gru --updates 100

Writes one JSON line per run to ``--out`` (default: stdout only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]



def one_run(model: str, data: str, updates: int, prefetch: int) -> dict:
    from platform.data.dataset import PreparedDataset
    from platform.training.config import resolve_config
    from platform.training.context import Context
    from platform.training.hooks import LocalHooks
    from platform.training.loop import fit

    config = resolve_config(model, "cpu", max_updates=updates, overrides=[
        f"batching.prefetch={prefetch}", "log_every=0", "eval.max_sentences=1", "average_last=0"])
    dataset = PreparedDataset.open(data)
    with tempfile.TemporaryDirectory() as directory:
        began = time.perf_counter()
        history = fit(config, dataset, Context(), LocalHooks(Path(directory), config), log=lambda line: None)
        wall = time.perf_counter() - began
    last = history[-1]
    return {"model": model, "prefetch": prefetch, "updates": updates, "wall_s": wall,
            "tokens_per_s": last["tokens_per_s"], "data_wait_share": last["data_wait_share"],
            "steps_s": last["steps_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a prepared dataset directory")
    parser.add_argument("--model", default="transformer")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (this machine's cores)")
    parser.add_argument("--out", help="append JSON lines here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {0: [], 2: []}
    for round_ in range(args.rounds):
        for prefetch in ((0, 2) if round_ % 2 == 0 else (2, 0)):  # alternate which goes first
            result = one_run(args.model, args.data, args.updates, prefetch)
            results[prefetch].append(result)
            print(json.dumps(result), flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(result) + "\n")
    inline, threaded = (statistics.median(r["wall_s"] for r in results[p]) for p in (0, 2))
    waits = {p: statistics.median(r["data_wait_share"] for r in results[p]) for p in (0, 2)}
    print(f"{args.model}: median wall time prefetch 0 {inline:.1f} s, prefetch 2 {threaded:.1f} s "
          f"(speed ratio {inline / threaded:.3f}); data wait share {waits[0]:.2%} → {waits[2]:.2%}")


if __name__ == "__main__":
    main()
