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
class Source:
    """A padded batch of source sentences (no BOS/EOS: position i is subword i of the tree)."""

    ids: Tensor  # [B, S] int64, PAD after the end
    lengths: Tensor  # [B] int64
    depth: Tensor | None = None  # [B, S] depth in the subword dependency tree (deprel)
    tree_parent: Tensor | None = None  # [B, 2S-1] binary tree parents, phrase nodes at S.. (tree encoders)

    def to(self, device: torch.device | str) -> "Source":
        move = lambda t: t.to(device) if t is not None else None  # noqa: E731
        return Source(ids=move(self.ids), lengths=move(self.lengths), depth=move(self.depth),
                      tree_parent=move(self.tree_parent))

    @property
    def valid(self) -> Tensor:
        """[B, S] bool: True on real tokens."""
        positions = torch.arange(self.ids.shape[1], device=self.ids.device)
        return positions[None, :] < self.lengths[:, None]


@dataclass
class ModelOutput:
    """Teacher-forced outputs; losses are computed by the training code, not here."""

    logits: Tensor  # [B, T, V]
    enc_parse_logprobs: Tensor | None = None  # [B, S, S] log P(head of i = j), DBSA encoder
    dec_parse_logprobs: Tensor | None = None  # [B, T, T] same over decoder positions (causal; models/dbsa.py)
