"""Token-budget batches for DDP training, gathered from an example store (``data.examples``:
flat arrays, so a batch is a few slices).  ``ShardedBatches`` decides the batches from the
lengths alone:

1. per epoch, a generator seeded by ``(seed, epoch)`` shuffles the examples, and a stable sort
   by length groups similar lengths (ties stay shuffled; ``sort_by_length: false`` leaves the
   shuffled order, so each batch is a random sample);
2. consecutive examples are packed while ``num_sentences × (longest + 1)`` stays within
   ``max_tokens`` (the +1 is the BOS/EOS a model adds) and, where set, the batch has at most
   ``max_sentences`` (papers that count their batches in sentences); an example longer than
   the budget gets a batch of its own.  With ``pack`` the shuffled order is kept and the
   budget is ``Σ (length + 1)``: each batch is a random sample, and ``packing.collate_packed``
   puts several of its sentences in one row, so it costs no padding;
3. the batch order is shuffled; if the number of batches is not a multiple of the world size,
   the batches with the most sentences are split in two until it is — so **every rank runs
   the same number of steps** (DDP hangs otherwise) and **every example is seen exactly once
   per epoch** (nothing dropped, nothing repeated; with ``max_length``, only the examples
   within it: a paper's training-length limit);
4. rank ``r`` takes batches ``r, r + W, r + 2W, ...``.

Every rank computes the same plan from the same lengths, so no communication is needed.
``state_dict()`` / ``load_state_dict()`` save and restore the position mid-epoch: the next
iteration continues with exactly the batch that would have come next.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from platform.data.examples import Examples
from platform.data.packing import collate_packed, packed_row_count
from platform.data.tensors import Batch, round_up


@dataclass(frozen=True, kw_only=True)
class BatchingConfig:
    """How examples become updates.

    By default an update is one batch of at most ``max_tokens`` per rank, accumulated over
    ``update_freq`` batches (fairseq's ``--update-freq``): it sees up to
    ``max_tokens × update_freq × workers`` tokens, so the batch grows with the workers.  With
    ``global_tokens`` an update sees at most that many tokens whatever the workers: the platform
    picks the accumulation (the fewest batches of at most ``max_tokens`` per rank, which is then
    a memory cap) and the per-rank budget (``per_rank``), so runs on 1, 2 or 8 workers train
    with the same batch and are comparable."""

    max_tokens: int | None = 4096  # per rank and batch: sentences × (longest + 1); None: no token cap
    max_sentences: int | None = None  # per rank and batch (a paper's "batch size" in sentences)
    max_length: int | None = None  # train only on pairs of at most this many subwords a side
    update_freq: int = 1  # batches accumulated per update (with global_tokens: chosen, leave 1)
    global_tokens: int | None = None  # tokens per update over all ranks, independent of the workers
    # unpacked batches (the recurrent and tree encoders): True, each batch holds one length (the
    # least padding); False, each batch is a random sample of the split, as JoeyNMT's (more
    # padding, so fewer tokens per second)
    sort_by_length: bool = True
    # several random sentences per row, attention confined to each (models.inputs.Packing): the
    # composition of random batches at the speed of sorted ones (sort_by_length is then moot);
    # None: wherever the model can (the Transformer family), resolved when the config is loaded
    pack: bool | None = None
    pack_width: int = 32  # positions per packed row at least (a batch's longest sentence sets the width)
    # pad each batch's rows (packed) and lengths up to a multiple of this, so a compiled step
    # (``TrainConfig.compile``) sees a few shapes rather than one per batch; 1: no padding
    bucket: int = 1
    # packed batches padded up to the most rows any of this rank's batches of the epoch packs
    # into and to pack_width, so a compiled step with CUDA graphs records one graph an epoch (the
    # same one where epochs' largest batches bucket alike), the epochs' smaller last batches
    # included; a row wider than pack_width (a longer sentence) keeps a shape of its own
    fixed_shape: bool = False
    shuffle: bool = True
    seed: int = 1
    prefetch: int = 2  # updates collated ahead by a thread (0: on the training thread); no change to the order

    def __post_init__(self) -> None:
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be ≥ 0, got {self.prefetch}")
        if self.max_tokens is None and self.max_sentences is None:
            raise ValueError("set max_tokens, max_sentences or both")
        for key in ("max_tokens", "max_sentences", "max_length"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ValueError(f"{key} must be positive, got {getattr(self, key)}")
        if self.update_freq < 1:
            raise ValueError(f"update_freq must be ≥ 1, got {self.update_freq}")
        if self.pack_width < 1:
            raise ValueError(f"pack_width must be positive, got {self.pack_width}")
        if self.bucket < 1:
            raise ValueError(f"bucket must be positive, got {self.bucket}")
        if self.fixed_shape and self.pack is False:
            raise ValueError("fixed_shape pads packed batches to the epoch's largest batch's shape: it needs pack")
        if self.global_tokens is not None:
            if self.global_tokens < 1:
                raise ValueError(f"global_tokens must be positive, got {self.global_tokens}")
            if self.max_tokens is None:
                raise ValueError("global_tokens needs max_tokens (the per-batch memory cap)")
            if self.update_freq != 1:
                raise ValueError("set global_tokens or update_freq, not both (global_tokens chooses update_freq)")

    def per_rank(self, world_size: int) -> tuple[int | None, int]:
        """(tokens per rank and batch, batches accumulated per update) on ``world_size`` ranks."""
        if self.global_tokens is None:
            return self.max_tokens, self.update_freq
        update_freq = max(1, -(-self.global_tokens // (world_size * self.max_tokens)))  # ceil
        return max(1, self.global_tokens // (world_size * update_freq)), update_freq


class ShardedBatches:
    """This rank's token-budget batches of a split, epoch by epoch, with a restorable position."""

    def __init__(self, examples: Examples, config: BatchingConfig, *, rank: int = 0, world_size: int = 1):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        self.lengths = np.maximum(examples.src_lengths, examples.tgt_lengths)  # [N], the store's compact type
        usable = len(examples) if config.max_length is None else int((self.lengths <= config.max_length).sum())
        if usable < world_size:
            within = "" if config.max_length is None else f" of at most {config.max_length} subwords"
            raise ValueError(f"{examples.name}: {usable} examples{within} cannot feed {world_size} ranks")
        self.examples, self.config = examples, config
        self.rank, self.world_size = rank, world_size
        self.max_tokens, self.update_freq = config.per_rank(world_size)
        self.epoch, self.next_batch = 0, 0
        self._least: tuple[int, tuple[int, int]] | None = None  # fixed_shape: (epoch, its batches' least shape)
        self._planned: tuple[int, list[np.ndarray]] | None = None  # the last epoch planned, and its plan

    # --- the plan, identical on every rank
    def plan(self, epoch: int) -> list[np.ndarray]:
        """All ranks' batches of ``epoch`` (arrays of example indices), before sharding; the
        latest epoch's is kept (a worker holds one index per example, in int32 where it fits)."""
        if self._planned is None or self._planned[0] != epoch:
            self._planned = None  # the old plan goes before the new one is made
            self._planned = (epoch, self._make_plan(epoch))
        return self._planned[1]

    def _make_plan(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.config.seed, epoch])
        index_type = np.int32 if len(self.lengths) < np.iinfo(np.int32).max else np.int64
        order = rng.permutation(len(self.lengths)) if self.config.shuffle else np.arange(len(self.lengths))
        order = order.astype(index_type, copy=False)
        if self.config.sort_by_length and not self.config.pack:
            order = order[np.argsort(self.lengths[order], kind="stable")]
        if self.config.max_length is not None:
            order = order[self.lengths[order] <= self.config.max_length]
        batches = _pack(order, self.lengths, self.max_tokens, self.config.max_sentences, bool(self.config.pack))
        if self.config.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return _split_until_divisible(batches, self.world_size * self.update_freq)

    def updates(self) -> Iterator[list[Batch]]:
        """The rest of the current epoch as updates: ``update_freq`` consecutive batches of this
        rank each.  Update u covers the plan's batches ``u·W·F .. (u+1)·W·F − 1`` over all ranks,
        so 1 rank × F batches and F ranks × 1 batch see the same examples per update."""
        pending: list[Batch] = []
        for batch in self:
            pending.append(batch)
            if len(pending) == self.update_freq:
                yield pending
                pending = []

    def batches(self, epoch: int) -> list[np.ndarray]:
        return self.plan(epoch)[self.rank :: self.world_size]

    def __len__(self) -> int:
        """This rank's batches in the current epoch (the same on every rank; updates are
        ``len // update_freq``)."""
        return len(self.batches(self.epoch))

    # --- iteration with a position
    def __iter__(self) -> Iterator[Batch]:
        """The rest of the current epoch from the saved position; then the position moves on."""
        batches = self.batches(self.epoch)
        while self.next_batch < len(batches):
            indices = batches[self.next_batch]
            self.next_batch += 1
            yield self._collate(indices)
        self.epoch, self.next_batch = self.epoch + 1, 0

    def _collate(self, indices: np.ndarray) -> Batch:
        if not self.config.pack:
            return self.examples.collate(indices, self.config.bucket)
        least = self.least(self.epoch) if self.config.fixed_shape else (0, 0)
        return collate_packed(self.examples, indices, self.config.pack_width, self.config.bucket, least)

    def least(self, epoch: int) -> tuple[int, int]:
        """``fixed_shape``'s least (rows, positions a side) in ``epoch``: the most rows any of this
        rank's batches of the epoch packs into (each batch's first fit, about 10 ms a batch of
        16k positions: 0.35 s an epoch of Tanaka, once), and ``pack_width``.  Not the epoch's
        first batch: the batch order is shuffled, so the first may be the small last one, and
        full batches differ by a few rows.  It depends on the plan alone, so a resumed run pads
        exactly as an uninterrupted one."""
        if self._least is None or self._least[0] != epoch:
            width, bucket = self.config.pack_width, self.config.bucket
            rows = max(packed_row_count(self.examples, indices, width, bucket) for indices in self.batches(epoch))
            self._least = (epoch, (rows, round_up(width, bucket)))
        return self._least[1]

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.next_batch = epoch, 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "next_batch": self.next_batch, **self._layout()}

    def _layout(self) -> dict[str, Any]:
        """What decides the batch order: a saved position is valid only where all of it is equal."""
        return {"seed": self.config.seed, "world_size": self.world_size, "num_examples": len(self.lengths),
                "max_tokens": self.max_tokens, "update_freq": self.update_freq,
                "max_sentences": self.config.max_sentences, "max_length": self.config.max_length,
                "sort_by_length": self.config.sort_by_length, "pack": bool(self.config.pack)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in self._layout().items():
            saved = state.get(key)
            if saved != value:
                hint = (f" (resume with --set batching.{key}={str(saved).lower()})"
                        if key in ("pack", "sort_by_length") else "")
                raise ValueError(f"cannot restore batch position: saved {key}={saved!r}, now {value!r}{hint}")
        self.epoch, self.next_batch = int(state["epoch"]), int(state["next_batch"])


def _pack(order: np.ndarray, lengths: np.ndarray, max_tokens: int | None,
          max_sentences: int | None = None, packed: bool = False) -> list[np.ndarray]:
    """Greedy batches of consecutive examples under ``count × (longest + 1) <= max_tokens``
    (``packed``: ``Σ (length + 1) <= max_tokens``, rows without padding) and
    ``count <= max_sentences`` (either None: no such cap)."""
    tokens, sentences = max_tokens or float("inf"), max_sentences or float("inf")
    batches, start, longest, total = [], 0, 0, 0
    for position, index in enumerate(order):
        length = int(lengths[index]) + 1
        count = position - start + 1
        cost = total + length if packed else max(longest, length) * count
        if position > start and (cost > tokens or count > sentences):
            batches.append(order[start:position])
            start, longest, total = position, 0, 0
        longest, total = max(longest, length), total + length
    batches.append(order[start:])
    return batches


def _split_until_divisible(batches: list[np.ndarray], world_size: int) -> list[np.ndarray]:
    batches = list(batches)
    while len(batches) % world_size:
        largest = max(range(len(batches)), key=lambda i: len(batches[i]))
        if len(batches[largest]) < 2:
            raise ValueError(f"{sum(map(len, batches))} examples cannot be spread over {world_size} ranks")
        half = len(batches[largest]) // 2
        batches[largest : largest + 1] = [batches[largest][:half], batches[largest][half:]]
    return batches
