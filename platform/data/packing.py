"""Packed rows: several sentences of a batch back to back in each row, each with its target
in the same row, so a batch of random sentences costs no padding (``BatchingConfig.pack``).
The models confine attention and positions to each sentence (``models.inputs.Packing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from models.inputs import BOS_ID, EOS_ID, PAD_ID, Packing
from platform.data.tensors import HEAD_COLUMNS, LIST_COLUMNS, PAD_VALUES, Batch, PackedRows, round_up

if TYPE_CHECKING:
    from platform.data.examples import Examples


def collate_packed(examples: Examples, indices: Sequence[int], width: int, bucket: int = 1,
                   least: tuple[int, int] = (0, 0)) -> Batch:
    """The sentences of ``indices`` packed into rows of at most ``width`` source and target
    positions (wider where one sentence is), first fit in decreasing length: a row holds
    sentences back to back, each with its target in the same row (``PackedRows``).  The
    per-sentence fields (``indices``, lengths) list the sentences in row order.

    ``bucket``: the rows and each side's width are padded up to a multiple of it.  An added row
    holds no sentence, only a padding token at position 0 marked as a sentence of its own on both
    sides, so its queries have a key to attend (a row with none would give NaN) and it adds
    nothing to the loss (its targets are padding).

    ``least``: at least this many rows and positions a side (``BatchingConfig.fixed_shape``:
    every batch of an epoch takes the shape of the one with the most rows)."""
    indices = np.asarray(indices, dtype=np.int64)
    rows, src_len, tgt_len = _packed_rows(examples, indices, width)
    order = [m for members in rows for m in members]  # the batch's sentences in row order
    indices, src_len, tgt_len = indices[order], src_len[order], tgt_len[order]
    row = np.repeat(np.arange(len(rows)), [len(members) for members in rows])  # [N] each sentence's row
    first = np.searchsorted(row, row)  # [N] the row's first sentence
    shape_rows = max(round_up(len(rows), bucket), least[0])
    layout = {side: _Spans(lengths, row, first, rows=shape_rows, bucket=bucket, least_width=least[1])
              for side, lengths in (("src", src_len), ("tgt", tgt_len))}
    words = {"src": layout["src"], "tgt": _Spans(tgt_len - 1, row, first, layout["tgt"].start)}  # targets without EOS
    columns = {name: _packed_column(examples, name, indices, words[name[:3]], layout[name[:3]].shape)
               for name in LIST_COLUMNS if name != "src_tree_parent"}
    tgt_in = _add_bos_eos(columns["tgt_ids"], words["tgt"], row)
    tensors = {name: torch.from_numpy(value) for name, value in columns.items()}
    rows_ = PackedRows(source=layout["src"].packing(), target=layout["tgt"].packing(),
                       tgt_in=torch.from_numpy(tgt_in), tgt_out=tensors["tgt_ids"])
    return Batch(indices=torch.from_numpy(indices), src_lengths=torch.from_numpy(src_len),
                 tgt_lengths=torch.from_numpy(tgt_len - 1),
                 src_tree_parent=torch.full((shape_rows, 1), -1, dtype=torch.int64), rows=rows_, **tensors)


def _packed_column(examples: Examples, name: str, indices: np.ndarray, spans: _Spans,
                   shape: tuple[int, int]) -> np.ndarray:
    """Column ``name`` of the sentences ``indices`` laid out in rows as ``spans`` says."""
    values = examples.values[name][np.repeat(examples.offsets[name][indices], spans.lengths) + spans.within]
    if name in HEAD_COLUMNS:  # a head is a position: the sentence's own, offset in the row
        values = np.where(values >= 0, values + spans.rows_cols[1] - spans.within, values)
    out = np.full(shape, PAD_VALUES.get(name, -1), dtype=np.int64)
    out[spans.rows_cols] = values
    return out


class _Spans:
    """Where the sentences of a packed batch sit on one side: sentence i (in row order, in row
    ``row[i]``) takes ``lengths[i]`` positions from ``start[i]``; ``rows_cols`` index them all."""

    def __init__(self, lengths: np.ndarray, row: np.ndarray, first: np.ndarray, start: np.ndarray | None = None,
                 rows: int | None = None, bucket: int = 1, least_width: int = 0):
        self.lengths = lengths
        ends = np.cumsum(lengths)
        if start is None:  # back to back within each row
            start = ends - lengths - (ends - lengths)[first]
        self.start = start
        self.real_rows = int(row[-1]) + 1
        width = max(round_up(int((start + lengths).max()), bucket), least_width)
        self.shape = (rows or self.real_rows, width)  # [R, W]
        self.within = np.arange(ends[-1]) - np.repeat(ends - lengths, lengths)  # position in the sentence
        self.rows_cols = (np.repeat(row, lengths), np.repeat(start, lengths) + self.within)
        self.number = np.repeat(np.arange(len(row)) - first, lengths)  # each position's sentence in its row

    def packing(self) -> Packing:
        """The models' view: each position's sentence (-1 on padding) and its position in it."""
        sentence, position = np.full(self.shape, -1, dtype=np.int64), np.zeros(self.shape, dtype=np.int64)
        sentence[self.rows_cols], position[self.rows_cols] = self.number, self.within
        sentence[self.real_rows:, 0] = 0  # an added row: one padding token, a sentence of its own
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


def packed_row_count(examples: Examples, indices: Sequence[int], width: int, bucket: int = 1) -> int:
    """The rows ``collate_packed`` packs the sentences of ``indices`` into, padded to ``bucket``
    (its first fit only: no column is read)."""
    return round_up(len(_packed_rows(examples, np.asarray(indices, dtype=np.int64), width)[0]), bucket)


def _packed_rows(examples: Examples, indices: np.ndarray, width: int) -> tuple[list[np.ndarray], np.ndarray,
                                                                               np.ndarray]:
    """The first-fit rows of ``indices``'s sentences (``_first_fit``), with their source lengths
    and target lengths + 1 (EOS / BOS)."""
    src_len, tgt_len = examples.lengths_of(indices)
    tgt_len = tgt_len + 1
    return _first_fit(src_len, tgt_len, max(width, int(src_len.max()), int(tgt_len.max()))), src_len, tgt_len


def _first_fit(src_len: np.ndarray, tgt_len: np.ndarray, width: int) -> list[np.ndarray]:
    """Rows of sentence numbers: first fit in decreasing order of length, each row within
    ``width`` on both sides.  Each sentence's first fitting row is found over all rows at once
    (one array comparison per sentence, not a Python loop over the rows: a GPU's batch of 16k
    positions packs in a few milliseconds)."""
    order = np.argsort(-np.maximum(src_len, tgt_len), kind="stable")
    used = np.zeros((2, len(order)), dtype=np.int64)  # per row: source and target positions taken
    row_of = np.empty(len(order), dtype=np.int64)
    rows = 0
    for m in order:
        fits = np.flatnonzero((used[0, :rows] + src_len[m] <= width) & (used[1, :rows] + tgt_len[m] <= width))
        r = int(fits[0]) if len(fits) else rows
        rows += r == rows
        used[0, r] += src_len[m]
        used[1, r] += tgt_len[m]
        row_of[m] = r
    placed = order[np.argsort(row_of[order], kind="stable")]  # by row, in the order each row was filled
    return np.split(placed, np.cumsum(np.bincount(row_of, minlength=rows))[:-1])
