"""The example stores a batch is gathered from: a split's list columns as flat arrays, where
row ``i`` of column ``c`` is ``values[c][offsets[c][i]:offsets[c][i + 1]]``.

- ``ParquetExamples``: a split held in memory with its texts (dev, test, inference inputs);
- ``data.mapped.MappedExamples``: the train split memory-mapped from a node-local file, its
  texts left out (training never reads them), so a worker's memory does not grow with the corpus.

Both give the same arrays' values, so ``collate`` (one sentence per row) and
``packing.collate_packed`` (several) gather identical batches from either.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from platform.data.tensors import LIST_COLUMNS, PAD_VALUES, TEXT_COLUMNS, Batch, round_up


class Examples:
    """A split's list columns as flat arrays (values and offsets per column) and each side's
    lengths; subclasses say where the arrays live."""

    name: str  # where the split came from, in errors
    values: dict[str, np.ndarray]  # column → [total values] (any integer type)
    offsets: dict[str, np.ndarray]  # column → [N + 1] int64
    src_lengths: np.ndarray  # [N] subwords per source sentence
    tgt_lengths: np.ndarray  # [N]

    def __len__(self) -> int:
        return len(self.src_lengths)

    def row(self, name: str, index: int) -> np.ndarray:
        offsets = self.offsets[name]
        return self.values[name][offsets[index]:offsets[index + 1]]

    def lengths_of(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Source and target lengths of the rows ``indices``, as int64 ([B] each)."""
        return self.src_lengths[indices].astype(np.int64), self.tgt_lengths[indices].astype(np.int64)

    def collate(self, indices: Sequence[int], bucket: int = 1) -> Batch:
        """The sentences ``indices``, one per row, padded to the longest of each side rounded
        up to a multiple of ``bucket``."""
        indices = np.asarray(indices, dtype=np.int64)
        src_len, tgt_len = self.lengths_of(indices)
        longest_src, longest_tgt = round_up(int(src_len.max()), bucket), round_up(int(tgt_len.max()), bucket)
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
                     tgt_lengths=torch.from_numpy(tgt_len), **padded)

    def _tree_parents(self, indices: np.ndarray, longest: int) -> torch.Tensor:
        return pad_tree_parents([self.row("src_tree_parent", index) for index in indices], longest)


class ParquetExamples(Examples):
    """A prepared split (a pyarrow Table with the dataset schema's columns, as
    ``data.dataset.read_examples`` reads one) held in memory, with its texts."""

    def __init__(self, table, name: str = "examples"):
        self.name = name
        self.values, self.offsets = {}, {}
        for column_name in LIST_COLUMNS:
            column = table.column(column_name).combine_chunks()
            self.offsets[column_name] = column.offsets.to_numpy()
            self.values[column_name] = column.values.to_numpy()
        self.texts = {column_name: table.column(column_name).to_pylist() for column_name in TEXT_COLUMNS}
        self.src_lengths = np.diff(self.offsets["src_ids"]).astype(np.int64)
        self.tgt_lengths = np.diff(self.offsets["tgt_ids"]).astype(np.int64)


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
