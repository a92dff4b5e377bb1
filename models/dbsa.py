"""The biaffine parse head of dependency-based self-attention (Deguchi et al. 2019, eq. 11–17).

In encoder layer ``p_enc`` and decoder layer ``p_dec`` one attention head is replaced by this
head.  It has its own projections to the head dimension and attends from each token to its
(predicted) syntactic head:

    Q_parse = X W^Q,  K_parse = X W^K,  V_parse = X W^V                      (eq. 11–13)
    S = Q_parse U1 K_parseᵀ + 1 (K_parse u)ᵀ                                   (eq. 14, see below)
    A_parse = softmax(S)     (over allowed key positions)                       (eq. 15)
    M_parse = A_parse V_parse                                                   (eq. 16)

Eq. 14 as printed adds ``Q_parse U2`` with identical columns, i.e. a per-query constant,
which the row softmax cancels.  We implement the biaffine *key-side* bias ``K_parse u`` (the
"head prior" of Dozat & Manning 2017) instead, as the authors' public code does.  The decoder
head is causally masked (their Figure 3).  ``A_parse`` is trained towards each token's head
(eq. 17); the log-probabilities are returned so the loss ``e_tok + λ_enc e_enc + λ_dec e_dec``
(eq. 18) is computed by the training code.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

IGNORE_INDEX = -100  # the cross-entropy ignore index used for unsupervised positions


class BiaffineParseHead(nn.Module):
    def __init__(self, d_model: int, head_dim: int):
        super().__init__()
        self.query = nn.Linear(d_model, head_dim)  # W^Q_parse, eq. 11
        self.key = nn.Linear(d_model, head_dim, bias=False)  # W^K_parse, eq. 12 (a bias would cancel in softmax)
        self.value = nn.Linear(d_model, head_dim)  # W^V_parse, eq. 13
        self.bilinear = nn.Parameter(torch.empty(head_dim, head_dim))  # U1, eq. 14
        self.key_bias = nn.Parameter(torch.zeros(head_dim))  # u: the head prior (replaces Q U2)
        nn.init.xavier_uniform_(self.bilinear)

    def project_keys(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """K_parse, V_parse of x [B, S, D] → ([B, S, K], [B, S, K]) (cached while decoding)."""
        return self.key(x), self.value(x)

    def forward(self, x: Tensor, keys: Tensor, values: Tensor, allowed: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, Sq, D]; keys/values [B, Sk, K]; allowed [B, Sq, Sk] bool.

        Returns M_parse [B, Sq, K] and log A_parse [B, Sq, Sk] (−inf where not allowed)."""
        q = self.query(x)  # [B, Sq, K]
        scores = (q @ self.bilinear) @ keys.transpose(1, 2)  # Q U1 Kᵀ: [B, Sq, Sk]
        scores = scores + (keys @ self.key_bias)[:, None, :]  # + K u, the same for every query
        scores = scores.masked_fill(~allowed, float("-inf"))
        log_attention = torch.log_softmax(scores.float(), dim=-1)  # eq. 15, in fp32 for the loss
        output = log_attention.exp().to(values.dtype) @ values  # eq. 16: [B, Sq, K]
        return output, log_attention


def encoder_parse_targets(src_heads: Tensor) -> Tensor:
    """Targets for the encoder parse head: each subword's head index; padding (−1) is ignored."""
    return src_heads.masked_fill(src_heads < 0, IGNORE_INDEX)


def decoder_parse_targets(tgt_heads: Tensor) -> Tensor:
    """Targets over decoder *input* positions (BOS y1 .. yT) from tgt_heads [B, T] → [B, T+1].

    Token y_i sits at input position i+1 and its head y_h at h+1.  Position 0 (BOS) and every
    token whose head lies in the future (h > i, hidden by the causal mask) are not supervised."""
    batch, length = tgt_heads.shape
    positions = torch.arange(length, device=tgt_heads.device)[None, :]  # [1, T]
    supervised = (tgt_heads >= 0) & (tgt_heads <= positions)
    targets = torch.where(supervised, tgt_heads + 1, torch.full_like(tgt_heads, IGNORE_INDEX))
    bos = torch.full((batch, 1), IGNORE_INDEX, dtype=targets.dtype, device=targets.device)
    return torch.cat([bos, targets], dim=1)

