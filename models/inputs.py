"""What models consume and return: small typed containers (batch-first tensors).

Shape legend: B batch, S source length, T target length (incl. BOS), V vocabulary,
N = 2S-1 tree nodes.  Masks are bool with True = valid / may attend.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3  # the ids every prepared dataset uses


@dataclass
class Packing:
    """Several sentences in one row (training only; Krell et al. 2021's packing without
    cross-contamination): which sentence each position belongs to and its position in it.
    Attention is confined to each sentence (``same_sentence``), positions restart at 0, so a
    packed row computes what its sentences would one per row."""

    sentence: Tensor  # [B, L] int64: 0, 1, ... per row; -1 on padding
    position: Tensor  # [B, L] int64: position within the sentence (0 on padding)

    def to(self, device: torch.device | str) -> Packing:
        return Packing(sentence=self.sentence.to(device), position=self.position.to(device))

    def pin_memory(self) -> Packing:
        return Packing(sentence=self.sentence.pin_memory(), position=self.position.pin_memory())


def same_sentence(queries: Tensor, keys: Tensor) -> Tensor:
    """[B, Lq], [B, Lk] sentence ids → [B, Lq, Lk] bool: a query may attend the keys of its own
    sentence; a padding query (-1) attends every real key (its output is never used, and a row
    with no allowed key would give NaN)."""
    real_key = (keys >= 0)[:, None, :]
    return real_key & ((queries[:, :, None] == keys[:, None, :]) | (queries < 0)[:, :, None])


@dataclass
class Source:
    """A padded batch of source sentences (no BOS/EOS: position i is subword i of the tree)."""

    ids: Tensor  # [B, S] int64, PAD after the end
    lengths: Tensor  # [B] int64
    depth: Tensor | None = None  # [B, S] depth in the subword dependency tree (deprel)
    tree_parent: Tensor | None = None  # [B, 2S-1] binary tree parents, phrase nodes at S.. (tree encoders)
    packed: Packing | None = None  # several sentences per row (then ``lengths`` are the rows' used lengths)

    def to(self, device: torch.device | str) -> Source:
        move = lambda t: t.to(device) if t is not None else None  # noqa: E731
        return Source(ids=move(self.ids), lengths=move(self.lengths), depth=move(self.depth),
                      tree_parent=move(self.tree_parent), packed=move(self.packed))

    @property
    def valid(self) -> Tensor:
        """[B, S] bool: True on real tokens."""
        if self.packed is not None:
            return self.packed.sentence >= 0
        positions = torch.arange(self.ids.shape[1], device=self.ids.device)
        return positions[None, :] < self.lengths[:, None]


@dataclass
class ModelOutput:
    """Teacher-forced outputs; losses are computed by the training code, not here."""

    logits: Tensor  # [B, T, V]
    enc_parse_logprobs: Tensor | None = None  # [B, S, S] log P(head of i = j), DBSA encoder
    dec_parse_logprobs: Tensor | None = None  # [B, T, T] same over decoder positions (causal; models/dbsa.py)
