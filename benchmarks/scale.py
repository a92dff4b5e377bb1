"""How preparing and training scale with the corpus: peak memory, private memory per pair, time
to the first update and the data-wait share, on synthetic corpora of millions of pairs.

    python -m benchmarks.scale --pairs 1000000 2000000 5000000 --work /tmp/scale
    python -m benchmarks.scale --pairs 1000000 --work /tmp/scale --steps prepare

For each size N it generates a synthetic CoNLL-U corpus of N pairs (the demo grammar's large
lexicon, each sentence two to four clauses joined under the first clause's root: 20–40 words a
side, real dependency trees; written once under ``--work``, never committed; a multiple of a million
repeats the first million), then measures,
each in a fresh process:

- ``prepare``: ``python -m platform.prepare`` on it: wall time and peak RSS;
- ``worker``: a training worker's private memory (the process's ``RssAnon``: memory no file
  backs) before and after it opens the train split and collates its first update (and its peak
  on the way, sampled every 5 ms), per pair, and
  the time that takes, for the node-local memory-mapped split (``mapped``: what training reads;
  ``mapped-first``: the node's first worker, which makes the node's copy) and the whole split
  loaded into memory (``in-memory``, the reader before it);
- ``train``: 40 updates of the CPU-size Transformer through ``training.loop.fit``, with the mapped
  split's pages dropped from the page cache first (``cold``), in it (``warm``), and on the split
  held in memory (``in-memory``): the share of the step spent waiting for data.

``--dataset DIR`` measures ``worker`` and ``train`` on a prepared dataset instead (the demo).

Prints one JSON line per measurement (``--out`` appends them to a file too).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS = [sys.executable, "-m", "benchmarks.scale"]  # this benchmark again, in a process of its own

SRC, TGT = "sov", "svo"
SPLIT_PAIRS = {"dev": 500, "test": 500}
IN_MEMORY_LIMIT = 1_000_000  # the reader that holds the split whole is measured up to this size
UNIQUE_PAIRS = 1_000_000  # larger corpora repeat this many generated pairs (generating is the slow part)


# ----------------------------------------------------------------------------- the corpus


def write_corpus(directory: Path, pairs: int, seed: int = 1) -> Path:
    """``train``/``dev``/``test`` CoNLL-U pairs of the synthetic corpus (``pairs`` training
    pairs) under ``directory``; returns it.  Kept if already complete."""
    from platform.data import demo

    done = directory / "COMPLETE"
    if done.exists():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    if pairs > UNIQUE_PAIRS and pairs % UNIQUE_PAIRS == 0:
        return _repeated(write_corpus(directory.with_name(f"corpus-{UNIQUE_PAIRS}"), UNIQUE_PAIRS, seed), directory,
                         pairs // UNIQUE_PAIRS)
    config = demo.DemoConfig(num_train=pairs, seed=seed, num_nouns=1600, num_verbs=600, num_adjectives=400)
    lexicon = demo.build_lexicon(config)
    for split, count in (("train", pairs), *SPLIT_PAIRS.items()):
        clauses = demo.generate(config, split, 4 * count, lexicon)
        rng = random.Random(f"{seed}/{split}/joins")
        with gzip.open(directory / f"{split}.{SRC}.conllu.gz", "wt", encoding="utf-8", compresslevel=1) as src, \
             gzip.open(directory / f"{split}.{TGT}.conllu.gz", "wt", encoding="utf-8", compresslevel=1) as tgt:
            for number in range(1, count + 1):
                joined = [next(clauses) for _ in range(rng.randint(2, 4))]
                src.write(joined_conllu([demo.to_conllu(p.src, "") for p in joined], f"{split}-{number}"))
                tgt.write(joined_conllu([demo.to_conllu(p.tgt, "") for p in joined], f"{split}-{number}"))
    done.write_text("")
    return directory


def _repeated(unique: Path, directory: Path, times: int) -> Path:
    """A corpus whose train split is ``unique``'s ``times`` over (gzip members back to back);
    dev and test as they are."""
    import shutil

    for name in (f"train.{SRC}.conllu.gz", f"train.{TGT}.conllu.gz"):
        with open(directory / name, "wb") as out:
            for _ in range(times):
                with open(unique / name, "rb") as part:
                    shutil.copyfileobj(part, out, 1 << 22)
    for split in SPLIT_PAIRS:
        for lang in (SRC, TGT):
            shutil.copyfile(unique / f"{split}.{lang}.conllu.gz", directory / f"{split}.{lang}.conllu.gz")
    (directory / "COMPLETE").write_text("")
    return directory


def joined_conllu(blocks: list[str], sent_id: str) -> str:
    """CoNLL-U sentences as one: each later sentence's root attached to the first's root."""
    lines, words, root = [], [], None
    for block in blocks:
        rows = [line.split("\t") for line in block.splitlines() if line and not line.startswith("#")]
        offset = len(lines)
        for columns in rows:
            head = int(columns[6])
            if head == 0 and root is not None:
                columns[6], columns[7] = str(root), "parataxis"
            else:
                columns[6] = str(head + offset if head else 0)
            columns[0] = str(int(columns[0]) + offset)
            lines.append("\t".join(columns))
            words.append(columns[1])
        if root is None:
            root = next(int(c[0]) for c in rows if c[6] == "0")
    return f"# sent_id = {sent_id}\n# text = {' '.join(words)}\n" + "\n".join(lines) + "\n\n"


# ----------------------------------------------------------------------------- measurements


# ``platform.prepare`` run in a process that reports its own peak: ``VmHWM`` counts from the exec,
# where a parent's ``wait4`` rusage would include the memory it forked the child with
PEAK_REPORTING = (
    "import runpy, sys\n"
    "sys.argv = ['platform.prepare', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('platform.prepare', run_name='__main__')\n"
    "finally:\n"
    "    peak = [line for line in open('/proc/self/status') if line.startswith('VmHWM:')][0].split()[1]\n"
    "    print(f'VmHWM {peak}', file=sys.stderr)\n"
)


def measure_prepare(corpus: Path, out: Path) -> dict:
    """``platform.prepare`` of the corpus, in its own process: wall time and peak RSS."""
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", PEAK_REPORTING, "--train", corpus / "train", "--dev", corpus / "dev",
                             "--test", corpus / "test", "--src", SRC, "--tgt", TGT, "--out", out, "--quiet"],
                            cwd=ROOT, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"platform.prepare failed with status {result.returncode}:\n{result.stderr[-3000:]}")
    peak_kb = int(result.stderr.strip().splitlines()[-1].split()[1])
    return {"wall_s": round(time.perf_counter() - began, 1), "peak_rss_mb": round(peak_kb / 1024, 1)}


def rss_anon() -> int:
    """This process's anonymous resident memory in bytes (what no file backs: its private memory)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def worker_probe(dataset: str, reader: str) -> dict:
    """In this (fresh) process: open the train split as ``reader`` says, plan the epoch and
    collate the first update; the private memory that took, per pair, and the time."""
    from platform.data import dataset as ds
    from platform.data.batching import ShardedBatches
    from platform.data.mapped import node_local_train
    from platform.training.config import resolve_config

    batching = resolve_config("transformer", "cpu").batching
    if reader == "mapped":  # the node's copy exists (a node's later workers); its making is not measured
        node_local_train(dataset, ds.read_meta(dataset))
    elif reader == "mapped-first":  # the node's first worker, which makes the copy
        os.environ["NMT_DATA_CACHE"] = tempfile.mkdtemp(prefix="nmt-scale-cache-")
    _warm_up()
    before, began = rss_anon(), time.perf_counter()
    with PeakSampler() as peak:  # the making of a copy allocates and frees: its peak, not what is left
        if reader.startswith("mapped"):
            examples = ds.PreparedDataset.open(dataset, with_dev=False).train
        else:
            examples = ds.read_examples(dataset, "train")
        sampler = ShardedBatches(examples, batching)
        next(sampler.updates())
    seconds = time.perf_counter() - began
    grown = rss_anon() - before
    return {"reader": reader, "pairs": len(examples), "private_mb": round(grown / 1e6, 1),
            "private_bytes_per_pair": round(grown / len(examples), 1),
            "peak_private_mb": round((peak.peak - before) / 1e6, 1), "first_update_s": round(seconds, 2)}


class PeakSampler:
    """The highest ``rss_anon`` while the block runs, sampled every 5 ms by a thread."""

    def __enter__(self) -> PeakSampler:
        import threading

        self.peak, self.done = rss_anon(), threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.done.wait(0.005):
            self.peak = max(self.peak, rss_anon())

    def __exit__(self, *error) -> None:
        self.done.set()
        self.thread.join()
        self.peak = max(self.peak, rss_anon())


def _warm_up() -> None:
    """What any worker has before it reads data (libraries imported, their pools started), so the
    measurement holds only what grows with the split."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet
    import torch

    torch.from_numpy(np.zeros(4, dtype=np.int64)).sum()
    pa.array(list(range(1000))).to_numpy()


def drop_from_page_cache(paths: list[Path]) -> None:
    """Evict these files' clean pages from the page cache (a cold start, without root)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def train_probe(dataset: str, cache: str, updates: int) -> dict:
    """In this (fresh) process: ``updates`` updates of the CPU-size Transformer on the mapped split
    (its pages evicted first where ``cache`` is ``cold``; ``in-memory``: the split read whole
    instead); the data-wait share of the steps."""
    import dataclasses

    import torch

    from platform.data import dataset as ds
    from platform.data.dataset import PreparedDataset
    from platform.data.mapped import node_local_train
    from platform.training.config import resolve_config
    from platform.training.context import Context
    from platform.training.hooks import LocalHooks
    from platform.training.loop import fit

    torch.set_num_threads(2)
    copy = node_local_train(dataset, ds.read_meta(dataset)).directory  # built (if not yet) before timing
    if cache == "cold":
        drop_from_page_cache([*copy.iterdir(), Path(dataset) / "train.parquet"])
    config = resolve_config("transformer", "cpu", max_updates=updates, overrides=[
        "log_every=0", "eval.max_sentences=1", "average_last=0"])
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        prepared = PreparedDataset.open(dataset)
        if cache == "in-memory":  # the split read whole into memory, the reader before the mapped one
            prepared = dataclasses.replace(prepared, train=ds.read_examples(dataset, "train"))
        history = fit(config, prepared, Context(), LocalHooks(Path(directory), config), log=lambda line: None)
    last = history[-1]
    return {"cache": cache, "updates": updates, "wall_s": round(time.perf_counter() - began, 1),
            "data_wait_share": round(last["data_wait_share"], 4), "tokens_per_s": round(last["tokens_per_s"])}


def in_fresh_process(*args: str) -> dict:
    result = subprocess.run([*THIS, "--probe", *args], cwd=ROOT, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"probe {args} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- the run


def run(pairs: int, work: Path, steps: list[str], emit) -> None:
    corpus = work / f"corpus-{pairs}"
    dataset = work / f"dataset-{pairs}"
    began = time.perf_counter()
    write_corpus(corpus, pairs)
    emit({"pairs": pairs, "step": "generate", "wall_s": round(time.perf_counter() - began, 1)})
    if "prepare" in steps or not dataset.exists():
        emit({"pairs": pairs, "step": "prepare", **measure_prepare(corpus, dataset)})
    if "worker" in steps:
        for reader in ("mapped", "mapped-first", "in-memory"):
            if reader == "in-memory" and pairs > IN_MEMORY_LIMIT:
                continue  # about 4 KB a pair: 5M pairs would need 20 GB
            emit({"pairs": pairs, "step": "worker", **in_fresh_process("worker", str(dataset), reader)})
    if "train" in steps:
        for cache in ("cold", "warm", "in-memory"):
            if cache == "in-memory" and pairs > IN_MEMORY_LIMIT:
                continue
            emit({"pairs": pairs, "step": "train", **in_fresh_process("train", str(dataset), cache)})


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        kind, dataset, option = sys.argv[2:5]
        result = worker_probe(dataset, option) if kind == "worker" else train_probe(dataset, option, 40)
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[1_000_000], help="corpus sizes (train pairs)")
    parser.add_argument("--work", type=Path, default=Path("scale-work"),
                        help="where corpora and datasets are written (and kept)")
    parser.add_argument("--steps", nargs="+", default=["prepare", "worker", "train"],
                        choices=["prepare", "worker", "train"])
    parser.add_argument("--dataset", help="measure worker and train on this prepared dataset (no corpus)")
    parser.add_argument("--out", help="append the JSON lines here too")
    args = parser.parse_args()
    args.work = args.work.resolve()  # the probes run from the repository root
    if args.dataset:
        args.dataset = str(Path(args.dataset).resolve())
    os.environ.setdefault("NMT_DATA_CACHE", str(args.work / "node-cache"))

    def emit(record: dict) -> None:
        line = json.dumps(record)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")

    if args.dataset:
        for reader in ("mapped", "mapped-first", "in-memory"):
            emit({"dataset": args.dataset, "step": "worker", **in_fresh_process("worker", args.dataset, reader)})
        for cache in ("warm", "in-memory"):
            emit({"dataset": args.dataset, "step": "train", **in_fresh_process("train", args.dataset, cache)})
        return
    for pairs in args.pairs:
        run(pairs, args.work, args.steps, emit)


if __name__ == "__main__":
    main()
