"""Relative position terms for self-attention, shared by Shaw et al. 2018 and Omote et al. 2019.

Shaw et al. (eq. 3–4): ``e_ij = q_i (k_j + a^K_ij)ᵀ / √d``, ``z_i = Σ_j α_ij (v_j + a^V_ij)``
with ``a_ij = w[clip(j − i, k)]``.  Omote et al. (eq. 16–19) use the same form with labels
``clip(depth(j) − depth(i), l)`` on the source dependency tree (``b^K``, ``b^V``), and
"dep+rel" adds both (eq. 21–22).  Key and value tables are separate, as in tensor2tensor.

Neither term materialises a ``[B, H, S, S, K]`` tensor:
* the key term is an additive attention bias, ``q_i · w^K_l`` computed for every label
  ``l`` (``[B, H, S, L]``) and gathered at ``label_ij`` → ``[B, H, S, S]``;
* the value term sums the attention weights per label (``[B, H, S, L]``, a scatter-add) and
  multiplies by ``w^V`` (``[L, K]``).

Shapes: B batch, H heads, Sq/Sk query/key length, K head dim, L = 2·clip + 1 labels.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def position_labels(num_queries: int, num_keys: int, clip: int, query_offset: int = 0,
                    device: torch.device | None = None) -> Tensor:
    """[Sq, Sk] labels ``clip(j − i, k) + k`` (Shaw eq. 3); queries start at ``query_offset``."""
    i = torch.arange(query_offset, query_offset + num_queries, device=device)[:, None]
    j = torch.arange(num_keys, device=device)[None, :]
    return (j - i).clamp(-clip, clip) + clip


def depth_labels(depth: Tensor, clip: int) -> Tensor:
    """[B, S, S] labels ``clip(depth(j) − depth(i), l) + l`` (Omote eq. 16) from depth [B, S]."""
    relative = depth[:, None, :].long() - depth[:, :, None].long()  # [B, S(i), S(j)]
    return relative.clamp(-clip, clip) + clip


class RelativeEmbeddings(nn.Module):
    """Key and/or value embeddings of relative labels, shared by the heads of one layer."""

    def __init__(self, clip: int, head_dim: int, *, keys: bool = True, values: bool = True):
        super().__init__()
        if clip < 1:
            raise ValueError(f"relative clip distance must be ≥ 1, got {clip}")
        if not (keys or values):
            raise ValueError("relative embeddings need keys, values or both")
        self.clip, self.head_dim = clip, head_dim
        self.keys = nn.Embedding(2 * clip + 1, head_dim) if keys else None  # w^K (a^K / b^K)
        self.values = nn.Embedding(2 * clip + 1, head_dim) if values else None  # w^V (a^V / b^V)

    def key_bias(self, q: Tensor, labels: Tensor) -> Tensor:
        """``q_i · w^K[label_ij] / √K``: q [B, H, Sq, K], labels [Sq, Sk] or [B, Sq, Sk] → [B, H, Sq, Sk]."""
        per_label = q @ self.keys.weight.t()  # [B, H, Sq, L]
        index = _broadcast_labels(labels, q.shape[:2])  # [B, H, Sq, Sk]
        return per_label.gather(-1, index) / math.sqrt(self.head_dim)

    def value_term(self, attention: Tensor, labels: Tensor) -> Tensor:
        """``Σ_j α_ij w^V[label_ij]``: attention [B, H, Sq, Sk] → [B, H, Sq, K]."""
        index = _broadcast_labels(labels, attention.shape[:2])  # [B, H, Sq, Sk]
        per_label = attention.new_zeros(*attention.shape[:3], 2 * self.clip + 1)  # [B, H, Sq, L]
        per_label.scatter_add_(-1, index, attention)
        return per_label @ self.values.weight  # [B, H, Sq, K]


def _broadcast_labels(labels: Tensor, batch_heads: torch.Size) -> Tensor:
    batch, heads = batch_heads
    if labels.dim() == 2:  # [Sq, Sk], the same for every sentence
        return labels[None, None].expand(batch, heads, *labels.shape)
    return labels[:, None].expand(batch, heads, *labels.shape[1:])  # [B, Sq, Sk] per sentence
