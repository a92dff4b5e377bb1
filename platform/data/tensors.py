"""A batch: the padded tensors one update trains on (``Batch``), and how the sentences of a
packed batch share its rows (``PackedRows``).  ``batching`` collates batches of one sentence
per row, ``packing`` those of several.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from models.inputs import PAD_ID, Packing

LIST_COLUMNS = ("src_ids", "tgt_ids", "src_heads", "tgt_heads", "src_word", "tgt_word", "src_depth", "tgt_depth",
                "src_tree_parent")
TEXT_COLUMNS = ("src_text", "tgt_text")
HEAD_COLUMNS = ("src_heads", "tgt_heads")  # values are positions in the sentence
PAD_VALUES = {"src_ids": PAD_ID, "tgt_ids": PAD_ID, "src_depth": 0, "tgt_depth": 0}  # others: -1


def round_up(value: int, multiple: int) -> int:
    """``value`` rounded up to a multiple of ``multiple`` (a batch dimension's bucket)."""
    return -(-value // multiple) * multiple


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
