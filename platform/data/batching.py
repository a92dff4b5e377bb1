"""Token-budget batches for DDP training, read from a prepared Parquet split.

``ParquetExamples`` loads a split into flat numpy arrays (one values array + offsets per list
column), so a batch is gathered with a few slices.  ``ShardedBatches`` decides the batches:

1. per epoch, a generator seeded by ``(seed, epoch)`` shuffles the examples, and a stable sort
   by length groups similar lengths (ties stay shuffled; ``sort_by_length: false`` leaves the
   shuffled order, so each batch is a random sample);
2. consecutive examples are packed while ``num_sentences × (longest + 1)`` stays within
   ``max_tokens`` (the +1 is the BOS/EOS a model adds) and, where set, the batch has at most
   ``max_sentences`` (papers that count their batches in sentences); an example longer than
   the budget gets a batch of its own.  With ``pack`` the shuffled order is kept and the
   budget is ``Σ (length + 1)``: each batch is a random sample, and ``collate_packed`` puts
   several of its sentences in one row, so it costs no padding (docs/performance.md);
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

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from models.inputs import BOS_ID, EOS_ID, PAD_ID, Packing

LIST_COLUMNS = ("src_ids", "tgt_ids", "src_heads", "tgt_heads", "src_word", "tgt_word", "src_depth", "tgt_depth", "src_tree_parent")
TEXT_COLUMNS = ("src_text", "tgt_text")
HEAD_COLUMNS = ("src_heads", "tgt_heads")  # values are positions in the sentence
PAD_VALUES = {"src_ids": PAD_ID, "tgt_ids": PAD_ID, "src_depth": 0, "tgt_depth": 0}  # others: -1


@dataclass
class Batch:
    """Padded, batch-first tensors of one batch (``B`` sentences, ``S``/``T`` longest lengths).

    Index-valued columns (heads, word, tree parents) are padded with -1, ids with PAD (0),
    depths with 0.  ``src_tree_parent`` is re-indexed for the padded batch: leaves are
    ``0..S-1`` and sentence b's phrase nodes are ``S..S+n_b-2`` (so its root is ``S+n_b-2``).
    """

    indices: torch.Tensor  # [B] row numbers in the Parquet file
    src_ids: torch.Tensor  # [B, S] int64
    src_lengths: torch.Tensor  # [B]
    tgt_ids: torch.Tensor  # [B, T] int64 (no BOS/EOS: the model adds them)
    tgt_lengths: torch.Tensor  # [B]
    src_heads: torch.Tensor  # [B, S]
    tgt_heads: torch.Tensor  # [B, T]
    src_word: torch.Tensor  # [B, S]
    tgt_word: torch.Tensor  # [B, T]
    src_depth: torch.Tensor  # [B, S]
    tgt_depth: torch.Tensor  # [B, T]
    src_tree_parent: torch.Tensor  # [B, 2S-1]
    src_text: list[str]
    tgt_text: list[str]
    rows: PackedRows | None = None  # packed batches: the list columns are rows of several sentences

    @property
    def num_sentences(self) -> int:
        return len(self.tgt_lengths)

    @property
    def num_tokens(self) -> int:
        """Target tokens incl. EOS: what a loss is averaged over."""
        return int(self.tgt_lengths.sum()) + len(self.tgt_lengths)

    def pin_memory(self) -> Batch:
        """A copy in page-locked memory, so ``to(cuda, non_blocking=True)`` overlaps the step."""
        pinned = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in pinned.items():
            if isinstance(value, torch.Tensor):
                pinned[name] = value.pin_memory()
        if self.rows is not None:
            pinned["rows"] = self.rows.pin_memory()
        return Batch(**pinned)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in moved.items():
            if isinstance(value, torch.Tensor):
                moved[name] = value.to(device, non_blocking=non_blocking)
        if self.rows is not None:
            moved["rows"] = self.rows.to(device, non_blocking)
        return Batch(**moved)


@dataclass
class PackedRows:
    """How the sentences of a packed batch share its ``R`` rows.  Source columns hold each row's
    sources back to back (``src_ids`` [R, S]); target columns are laid out as ``tgt_out``, each
    sentence's target followed by its EOS (``tgt_ids`` is ``tgt_out``), so sentence k of a row
    has its source and its target in that row.  Heads are row positions (a sentence's own plus
    where it starts), so the parse losses read them as they read one sentence per row; the
    source tree columns are not packed (the tree encoders train on one sentence per row)."""

    source: Packing  # [R, S] sentence of each source position, position within it
    target: Packing  # [R, T] the same over the decoder positions
    tgt_in: torch.Tensor  # [R, T] BOS y1..yn BOS z1..zm ... PAD
    tgt_out: torch.Tensor  # [R, T] y1..yn EOS z1..zm EOS ... PAD

    def pin_memory(self) -> PackedRows:
        return PackedRows(source=self.source.pin_memory(), target=self.target.pin_memory(),
                          tgt_in=self.tgt_in.pin_memory(), tgt_out=self.tgt_out.pin_memory())

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PackedRows:
        return PackedRows(source=self.source.to(device), target=self.target.to(device),
                          tgt_in=self.tgt_in.to(device, non_blocking=non_blocking),
                          tgt_out=self.tgt_out.to(device, non_blocking=non_blocking))


class ParquetExamples:
    """A prepared split held as flat numpy arrays: ``values[offsets[i]:offsets[i+1]]`` is row i."""

    def __init__(self, table, name: str = "examples"):
        """``table``: a pyarrow Table with the dataset schema's columns (``data.dataset.read_examples``
        reads one); ``name`` says where it came from, in errors."""
        self.name = name
        self.values: dict[str, np.ndarray] = {}
        self.offsets: dict[str, np.ndarray] = {}
        for name in LIST_COLUMNS:
            column = table.column(name).combine_chunks()
            self.offsets[name] = column.offsets.to_numpy()
            self.values[name] = column.values.to_numpy()
        self.texts = {name: table.column(name).to_pylist() for name in TEXT_COLUMNS}
        self.src_lengths = np.diff(self.offsets["src_ids"]).astype(np.int64)
        self.tgt_lengths = np.diff(self.offsets["tgt_ids"]).astype(np.int64)

    def __len__(self) -> int:
        return len(self.src_lengths)

    def row(self, name: str, index: int) -> np.ndarray:
        offsets = self.offsets[name]
        return self.values[name][offsets[index]:offsets[index + 1]]

    def collate(self, indices: Sequence[int]) -> Batch:
        indices = np.asarray(indices, dtype=np.int64)
        src_len, tgt_len = self.src_lengths[indices], self.tgt_lengths[indices]
        longest_src, longest_tgt = int(src_len.max()), int(tgt_len.max())
        padded = {}
        for name in LIST_COLUMNS:
            width = {"src": longest_src, "tgt": longest_tgt}[name[:3]]
            if name == "src_tree_parent":
                padded[name] = self._tree_parents(indices, longest_src)
                continue
            out = np.full((len(indices), width), PAD_VALUES.get(name, -1), dtype=np.int64)
            for b, index in enumerate(indices):
                values = self.row(name, index)
                out[b, : len(values)] = values
            padded[name] = torch.from_numpy(out)
        return Batch(indices=torch.from_numpy(indices), src_lengths=torch.from_numpy(src_len),
                     tgt_lengths=torch.from_numpy(tgt_len),
                     src_text=[self.texts["src_text"][i] for i in indices],
                     tgt_text=[self.texts["tgt_text"][i] for i in indices], **padded)

    def collate_packed(self, indices: Sequence[int], width: int) -> Batch:
        """The sentences of ``indices`` packed into rows of at most ``width`` source and target
        positions (wider where one sentence is), first fit in decreasing length: a row holds
        sentences back to back, each with its target in the same row (``PackedRows``).  The
        per-sentence fields (``indices``, lengths, texts) list the sentences in row order."""
        indices = np.asarray(indices, dtype=np.int64)
        src_len, tgt_len = self.src_lengths[indices], self.tgt_lengths[indices] + 1  # + EOS / BOS
        rows = _first_fit(src_len, tgt_len, max(width, int(src_len.max()), int(tgt_len.max())))
        order = [m for members in rows for m in members]  # the batch's sentences in row order
        indices, src_len, tgt_len = indices[order], src_len[order], tgt_len[order]
        row = np.repeat(np.arange(len(rows)), [len(members) for members in rows])  # [N] each sentence's row
        first = np.searchsorted(row, row)  # [N] the row's first sentence
        layout = {"src": _Spans(src_len, row, first), "tgt": _Spans(tgt_len, row, first)}
        words = {"src": layout["src"], "tgt": _Spans(tgt_len - 1, row, first, layout["tgt"].start)}  # targets without EOS
        columns = {name: self._packed_column(name, indices, words[name[:3]], layout[name[:3]].shape)
                   for name in LIST_COLUMNS if name != "src_tree_parent"}
        tgt_in = _add_bos_eos(columns["tgt_ids"], words["tgt"], row)
        tensors = {name: torch.from_numpy(value) for name, value in columns.items()}
        rows_ = PackedRows(source=layout["src"].packing(), target=layout["tgt"].packing(),
                           tgt_in=torch.from_numpy(tgt_in), tgt_out=tensors["tgt_ids"])
        return Batch(indices=torch.from_numpy(indices), src_lengths=torch.from_numpy(src_len),
                     tgt_lengths=torch.from_numpy(tgt_len - 1),
                     src_tree_parent=torch.full((len(rows), 1), -1, dtype=torch.int64),
                     src_text=[self.texts["src_text"][i] for i in indices],
                     tgt_text=[self.texts["tgt_text"][i] for i in indices], rows=rows_, **tensors)

    def _packed_column(self, name: str, indices: np.ndarray, spans: _Spans, shape: tuple[int, int]) -> np.ndarray:
        """Column ``name`` of the sentences ``indices`` laid out in rows as ``spans`` says."""
        values = self.values[name][np.repeat(self.offsets[name][indices], spans.lengths) + spans.within]
        if name in HEAD_COLUMNS:  # a head is a position: the sentence's own, offset in the row
            values = np.where(values >= 0, values + spans.rows_cols[1] - spans.within, values)
        out = np.full(shape, PAD_VALUES.get(name, -1), dtype=np.int64)
        out[spans.rows_cols] = values
        return out

    def _tree_parents(self, indices: np.ndarray, longest: int) -> torch.Tensor:
        return pad_tree_parents([self.row("src_tree_parent", index) for index in indices], longest)


def pad_tree_parents(parents: Sequence[np.ndarray], longest: int) -> torch.Tensor:
    """Per-sentence parent arrays (phrase nodes from n) → [B, 2S-1] with phrase nodes from S."""
    out = np.full((len(parents), max(2 * longest - 1, 1)), -1, dtype=np.int64)
    for b, parent in enumerate(parents):
        parent = np.asarray(parent, dtype=np.int64)
        n = (len(parent) + 1) // 2
        parent = np.where(parent >= n, parent + longest - n, parent)  # phrase node k → k + (S - n)
        out[b, :n] = parent[:n]
        out[b, longest : longest + n - 1] = parent[n:]
    return torch.from_numpy(out)


def pad(rows: Sequence[Sequence[int]], value: int) -> torch.Tensor:
    """Lists of ints → a padded int64 matrix [B, longest]."""
    out = np.full((len(rows), max(len(r) for r in rows)), value, dtype=np.int64)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return torch.from_numpy(out)


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
    # least padding); False, each batch is a random sample of the split, as JoeyNMT's, which
    # learns more per update at about half the CPU tokens/s (padding; docs/performance.md)
    sort_by_length: bool = True
    # several random sentences per row, attention confined to each (models.inputs.Packing): the
    # composition of random batches at the speed of sorted ones (sort_by_length is then moot);
    # None: wherever the model can (the Transformer family), resolved when the config is loaded
    pack: bool | None = None
    pack_width: int = 32  # positions per packed row at least (a batch's longest sentence sets the width)
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

    def __init__(self, examples: ParquetExamples, config: BatchingConfig, *, rank: int = 0, world_size: int = 1):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        self.lengths = np.maximum(examples.src_lengths, examples.tgt_lengths)
        usable = len(examples) if config.max_length is None else int((self.lengths <= config.max_length).sum())
        if usable < world_size:
            within = "" if config.max_length is None else f" of at most {config.max_length} subwords"
            raise ValueError(f"{examples.name}: {usable} examples{within} cannot feed {world_size} ranks")
        self.examples, self.config = examples, config
        self.rank, self.world_size = rank, world_size
        self.max_tokens, self.update_freq = config.per_rank(world_size)
        self.epoch, self.next_batch = 0, 0

    # --- the plan, identical on every rank
    def plan(self, epoch: int) -> list[np.ndarray]:
        """All ranks' batches of ``epoch`` (arrays of example indices), before sharding."""
        rng = np.random.default_rng([self.config.seed, epoch])
        order = rng.permutation(len(self.lengths)) if self.config.shuffle else np.arange(len(self.lengths))
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
            yield (self.examples.collate_packed(indices, self.config.pack_width) if self.config.pack
                   else self.examples.collate(indices))
        self.epoch, self.next_batch = self.epoch + 1, 0

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
        expected = self._layout()
        older = {"max_tokens": self.max_tokens, "update_freq": self.update_freq,  # checkpoints before accumulation,
                 "max_sentences": None, "max_length": None, "sort_by_length": True,
                 "pack": False}  # sentence batches, random ones, sorted, unpacked
        for key, value in expected.items():
            saved = state.get(key, older.get(key))
            if saved != value:
                hint = f" (resume with --set batching.{key}={str(saved).lower()})" if key in ("pack", "sort_by_length") else ""
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


class _Spans:
    """Where the sentences of a packed batch sit on one side: sentence i (in row order, in row
    ``row[i]``) takes ``lengths[i]`` positions from ``start[i]``; ``rows_cols`` index them all."""

    def __init__(self, lengths: np.ndarray, row: np.ndarray, first: np.ndarray, start: np.ndarray | None = None):
        self.lengths = lengths
        ends = np.cumsum(lengths)
        if start is None:  # back to back within each row
            start = ends - lengths - (ends - lengths)[first]
        self.start = start
        self.shape = (int(row[-1]) + 1, int((start + lengths).max()))  # [R, width]
        self.within = np.arange(ends[-1]) - np.repeat(ends - lengths, lengths)  # position in the sentence
        self.rows_cols = (np.repeat(row, lengths), np.repeat(start, lengths) + self.within)
        self.number = np.repeat(np.arange(len(row)) - first, lengths)  # each position's sentence in its row

    def packing(self) -> Packing:
        """The models' view: each position's sentence (-1 on padding) and its position in it."""
        sentence, position = np.full(self.shape, -1, dtype=np.int64), np.zeros(self.shape, dtype=np.int64)
        sentence[self.rows_cols], position[self.rows_cols] = self.number, self.within
        return Packing(sentence=torch.from_numpy(sentence), position=torch.from_numpy(position))


def _add_bos_eos(tgt: np.ndarray, words: _Spans, row: np.ndarray) -> np.ndarray:
    """Packed target rows [R, T] (sentences back to back, a free position after each): EOS into
    that position (``tgt`` becomes tgt_out), and tgt_in returned: BOS y1..yn per sentence."""
    tgt[row, words.start + words.lengths] = EOS_ID
    tgt_in = np.full(tgt.shape, PAD_ID, dtype=np.int64)
    tgt_in[row, words.start] = BOS_ID
    rows, cols = words.rows_cols
    tgt_in[rows, cols + 1] = tgt[rows, cols]
    return tgt_in


def _first_fit(src_len: np.ndarray, tgt_len: np.ndarray, width: int) -> list[list[int]]:
    """Rows of sentence numbers: first fit in decreasing order of length, each row within
    ``width`` on both sides."""
    rows: list[list[int]] = []
    used: list[list[int]] = []  # per row: source and target positions taken
    for m in sorted(range(len(src_len)), key=lambda m: -max(src_len[m], tgt_len[m])):
        for r, (s, t) in enumerate(used):
            if s + src_len[m] <= width and t + tgt_len[m] <= width:
                rows[r].append(m)
                used[r] = [s + src_len[m], t + tgt_len[m]]
                break
        else:
            rows.append([m])
            used.append([int(src_len[m]), int(tgt_len[m])])
    return rows


def _split_until_divisible(batches: list[np.ndarray], world_size: int) -> list[np.ndarray]:
    batches = list(batches)
    while len(batches) % world_size:
        largest = max(range(len(batches)), key=lambda i: len(batches[i]))
        if len(batches[largest]) < 2:
            raise ValueError(f"{sum(map(len, batches))} examples cannot be spread over {world_size} ranks")
        half = len(batches[largest]) // 2
        batches[largest : largest + 1] = [batches[largest][:half], batches[largest][half:]]
    return batches


class Prefetched:
    """The rest of the epoch's updates of ``sampler`` (``ShardedBatches.updates``), collated
    ``prefetch`` updates ahead by a thread (pinned for CUDA where ``pin``), or on the calling
    thread with ``prefetch`` 0: the same updates in the same order either way.

    ``state_dict()`` is the sampler's position after the last update *taken* (the thread may
    have collated further): what a checkpoint saves, so a resumed run continues at the next
    update it did not train.  ``wait_s`` adds up the time the caller waited for updates."""

    _END = object()

    def __init__(self, sampler: ShardedBatches, prefetch: int, pin: bool = False):
        self.sampler, self.prefetch, self.pin = sampler, prefetch, pin
        self.position = sampler.state_dict()
        self.wait_s = 0.0
        self._stop = threading.Event()
        self._queue: queue.Queue = queue.Queue(maxsize=max(prefetch, 1))
        self._thread: threading.Thread | None = None

    def state_dict(self) -> dict[str, Any]:
        return dict(self.position)

    def __iter__(self) -> Iterator[list[Batch]]:
        if self.prefetch == 0:
            yield from self._inline()
            return
        self._thread = threading.Thread(target=self._produce, name="collate", daemon=True)
        self._thread.start()
        while True:
            began = time.perf_counter()
            item = self._queue.get()
            self.wait_s += time.perf_counter() - began
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            update, self.position = item
            yield update

    def _inline(self) -> Iterator[list[Batch]]:
        updates = self.sampler.updates()
        while True:
            began = time.perf_counter()
            update = next(updates, None)
            self.wait_s += time.perf_counter() - began
            if update is None:
                return
            self.position = self.sampler.state_dict()
            yield update

    def _produce(self) -> None:
        try:
            for update in self.sampler.updates():
                if self.pin:
                    update = [batch.pin_memory() for batch in update]
                if not self._put((update, self.sampler.state_dict())):
                    return
            self._put(self._END)
        except BaseException as error:  # noqa: BLE001 - raised on the training thread
            self._put(error)

    def _put(self, item) -> bool:
        """Queue ``item`` unless ``close`` came first (False then)."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        """Stop the thread (an epoch cut short): what it collated ahead is dropped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
