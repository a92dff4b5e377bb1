"""Transformer building blocks (Vaswani et al. 2017, as written in Deguchi et al. 2019 eq. 1–10).

Shape legend: B batch, Sq/Sk query/key length, D model dim, H heads, K head dim (D / H).
Masks are bool, True = may attend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.dbsa import BiaffineParseHead
from models.relative import RelativeEmbeddings


@dataclass
class RelativeLabels:
    """Relative labels for one self-attention call (None where the model has no such term)."""

    position: Tensor | None = None  # [Sq, Sk] Shaw labels
    depth: Tensor | None = None  # [B, Sq, Sk] Omote labels


class MultiHeadAttention(nn.Module):
    """softmax(Q Kᵀ / √K + relative key bias) (V + relative values), per head; concat; W^O.

    ``parse_head`` replaces the *last* head by the DBSA biaffine head (Deguchi et al. eq. 16:
    M_parse takes the last head's place before the output projection).  Heads without
    relative value terms run in ``scaled_dot_product_attention``; the value terms need the
    attention weights, so a layer that has them computes attention explicitly.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, *,
                 rel_position: RelativeEmbeddings | None = None, rel_depth: RelativeEmbeddings | None = None,
                 parse_head: BiaffineParseHead | None = None):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not divisible by num_heads {num_heads}")
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.num_plain = num_heads - (1 if parse_head is not None else 0)  # heads using W^Q/W^K/W^V
        inner = self.num_plain * self.head_dim
        self.query = nn.Linear(d_model, inner)
        self.key = nn.Linear(d_model, inner, bias=False)  # a key bias adds a per-query constant: softmax cancels it
        self.value = nn.Linear(d_model, inner)
        self.output = nn.Linear(d_model, d_model)  # W^O
        self.dropout = dropout
        self.rel_position, self.rel_depth, self.parse_head = rel_position, rel_depth, parse_head

    def project_memory(self, memory: Tensor) -> dict[str, Tensor]:
        """Keys and values of the attended sequence [B, Sk, D] (cached while decoding)."""
        cache = {"k": self._split(self.key(memory)), "v": self._split(self.value(memory))}
        if self.parse_head is not None:
            cache["parse_k"], cache["parse_v"] = self.parse_head.project_keys(memory)
        return cache

    def forward(self, x: Tensor, kv: dict[str, Tensor], allowed: Tensor,
                labels: RelativeLabels | None = None) -> tuple[Tensor, Tensor | None]:
        """x [B, Sq, D]; kv from ``project_memory`` ([B, H', Sk, K]); allowed [B, Sq, Sk].

        Returns the output [B, Sq, D] and the parse head's log-probabilities [B, Sq, Sk] or None."""
        q = self._split(self.query(x))  # [B, H', Sq, K]
        heads = self._attend(q, kv["k"], kv["v"], allowed, labels or RelativeLabels())  # [B, H', Sq, K]
        parse_logprobs = None
        if self.parse_head is not None:
            parse, parse_logprobs = self.parse_head(x, kv["parse_k"], kv["parse_v"], allowed)
            heads = torch.cat([heads, parse[:, None]], dim=1)  # M_parse as the last head: [B, H, Sq, K]
        batch, _, length, _ = heads.shape
        merged = heads.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_dim)  # [B, Sq, D]
        return self.output(merged), parse_logprobs

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, labels: RelativeLabels) -> Tensor:
        tables = ((self.rel_position, labels.position), (self.rel_depth, labels.depth))
        relative = [(table, lab) for table, lab in tables if table is not None]
        if any(lab is None for _, lab in relative):
            raise ValueError("relative attention called without its labels")
        dropout = self.dropout if self.training else 0.0
        bias = None
        for table, lab in relative:
            if table.keys is not None:
                term = table.key_bias(q, lab)  # [B, H', Sq, Sk]
                bias = term if bias is None else bias + term
        mask = allowed[:, None]  # [B, 1, Sq, Sk]
        if not any(table.values is not None for table, _ in relative):
            if bias is not None:
                mask = bias.masked_fill(~mask, float("-inf"))
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # [B, H', Sq, Sk]
        if bias is not None:
            scores = scores + bias
        attention = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        attention = F.dropout(attention, dropout, self.training)
        out = attention @ v  # [B, H', Sq, K]
        for table, lab in relative:
            if table.values is not None:
                out = out + table.value_term(attention, lab)
        return out

    def _split(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_plain, self.head_dim).transpose(1, 2)  # [B, H', S, K]


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (Vaswani eq. 2 / Deguchi eq. 7)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.inner, self.outer, self.dropout = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.outer(self.dropout(torch.relu(self.inner(x))))


class Residual(nn.Module):
    """Post-LN ``LN(x + Dropout(f(x)))`` (the paper) or pre-LN ``x + Dropout(f(LN(x)))``."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm, self.dropout, self.pre_norm = nn.LayerNorm(d_model), nn.Dropout(dropout), pre_norm

    def forward(self, x: Tensor, sublayer) -> tuple[Tensor, object]:
        """``sublayer(h) -> (out, extra)``; returns the new x and the extra output."""
        out, extra = sublayer(self.norm(x) if self.pre_norm else x)
        x = x + self.dropout(out)
        return (x if self.pre_norm else self.norm(x)), extra


def sinusoidal_positions(length: int, d_model: int, offset: int = 0, device: torch.device | None = None) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani §3.5): [length, D]."""
    position = torch.arange(offset, offset + length, device=device, dtype=torch.float32)[:, None]
    even = torch.arange(0, d_model, 2, device=device, dtype=torch.float32)  # 2i
    frequency = torch.exp(even * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model, device=device)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table


class Embedding(nn.Module):
    """Token embedding × √D plus (optionally) sinusoidal positions, then dropout."""

    def __init__(self, vocab_size: int, d_model: int, dropout: float, absolute_positions: bool, pad_id: int = 0):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.scale, self.absolute_positions = math.sqrt(d_model), absolute_positions
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """ids [B, L] → [B, L, D]; ``offset`` is the position of ids[:, 0] (incremental decoding);
        ``positions`` [B, L], where given, each token's own (packed rows: restarting per sentence)."""
        x = self.tokens(ids) * self.scale
        if self.absolute_positions:
            if positions is None:
                x = x + sinusoidal_positions(ids.shape[1], x.shape[-1], offset, ids.device).to(x.dtype)
            else:
                table = sinusoidal_positions(ids.shape[1], x.shape[-1], 0, ids.device)  # positions < L
                x = x + table[positions].to(x.dtype)  # [B, L, D]
        return self.dropout(x)
