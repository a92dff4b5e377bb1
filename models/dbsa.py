"""The biaffine parse head of dependency-based self-attention (Deguchi et al. 2019, eq. 11–17).

In encoder layer ``p_enc`` and decoder layer ``p_dec`` one attention head is replaced by this
head.  It has its own projections to the head dimension and attends from each token to its
(predicted) syntactic head:

    Q_parse = X W^Q,  K_parse = X W^K,  V_parse = X W^V                      (eq. 11–13)
    S = (d_k^-1/2 Q_parse) U1 K_parseᵀ + 1 (K_parse u)ᵀ                        (eq. 14, see below)
    A_parse = softmax(S)     (over allowed key positions)                       (eq. 15)
    M_parse = A_parse V_parse                                                   (eq. 16)

Eq. 14 as printed adds ``Q_parse U2`` with identical columns, i.e. a per-query constant,
which the row softmax cancels.  We implement the biaffine *key-side* bias ``K_parse u`` (the
"head prior" of Dozat & Manning 2017) instead, as the authors' public code does.  The decoder
head is causally masked (their Figure 3).  ``A_parse`` is trained towards each token's head
(eq. 17); the log-probabilities are returned so the loss ``e_tok + λ_enc e_enc + λ_dec e_dec``
(eq. 18) is computed by the training code.

**Scale and initialisation (a deviation from eq. 14 as printed, following the authors'
release).**  The paper's eq. 14 has no scale; unscaled, an untrained head's scores are so
large that its parse cross-entropy on 25-token sentences starts near 17 nats instead of
log 25 ≈ 3.2, and with λ = 1 it dominates the first updates.  Like the authors' fairseq code
(``de9uch1/dbsa``, ``DependencyBasedSelfAttention``) we scale the parse queries by
``d_k^-1/2`` (as in eq. 1's scaled dot product), initialise ``U1`` Xavier-uniform with gain
``1/√2`` and ``u`` with zeros, so an untrained head starts near uniform over the allowed keys:
within half a nat of log n at paper size, where the head in layer 4 reads a LayerNorm output,
and within 2 nats in the platform's small presets, where the head in layer 1 reads the scaled
embeddings (tests/models/test_dbsa.py checks both on the real presets).  Dozat & Manning's
zero-initialised biaffine would start exactly uniform; we follow the release the paper's numbers
came from.

**Decoder positions.**  The paper masks the decoder head causally (its Figure 3) but does not
say at which position a target token's head is supervised.  By default (``"output"``) we do
what the authors' release does: the position that *predicts* y_i (its input is y_{i-1})
attends to the position that predicts y_i's head.  ``"input"`` supervises the position whose
input is y_i instead, attending to the input position of its head (the release's later
``--dependency-with-input``).  Either way a head in the future is hidden and unsupervised.
The model knob is ``dec_parse_target``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

DecoderParseTarget = Literal["input", "output"]

IGNORE_INDEX = -100  # the cross-entropy ignore index used for unsupervised positions


class BiaffineParseHead(nn.Module):
    def __init__(self, d_model: int, head_dim: int):
        super().__init__()
        self.query = nn.Linear(d_model, head_dim)  # W^Q_parse, eq. 11
        self.key = nn.Linear(d_model, head_dim, bias=False)  # W^K_parse, eq. 12 (a bias would cancel in softmax)
        self.value = nn.Linear(d_model, head_dim)  # W^V_parse, eq. 13
        self.bilinear = nn.Parameter(torch.empty(head_dim, head_dim))  # U1, eq. 14
        self.key_bias = nn.Parameter(torch.zeros(head_dim))  # u: the head prior (replaces Q U2)
        self.scale = head_dim ** -0.5  # the d_k^-1/2 of scaled dot-product attention (module doc)
        self.reset_biaffine()

    def reset_biaffine(self) -> None:
        """U1 Xavier-uniform with gain 1/√2 and u = 0, as the authors' release (module doc)."""
        nn.init.xavier_uniform_(self.bilinear, gain=1.0 / math.sqrt(2.0))
        nn.init.zeros_(self.key_bias)

    def project_keys(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """K_parse, V_parse of x [B, S, D] → ([B, S, K], [B, S, K]) (cached while decoding)."""
        return self.key(x), self.value(x)

    def forward(self, x: Tensor, keys: Tensor, values: Tensor, allowed: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, Sq, D]; keys/values [B, Sk, K]; allowed [B, Sq, Sk] bool.

        Returns M_parse [B, Sq, K] and log A_parse [B, Sq, Sk] (−inf where not allowed)."""
        q = self.query(x) * self.scale  # d_k^-1/2 Q_parse: [B, Sq, K]
        scores = (q @ self.bilinear) @ keys.transpose(1, 2)  # Q U1 Kᵀ: [B, Sq, Sk]
        scores = scores + (keys @ self.key_bias)[:, None, :]  # + K u, the same for every query
        scores = scores.masked_fill(~allowed, float("-inf"))
        log_attention = torch.log_softmax(scores.float(), dim=-1)  # eq. 15, in fp32 for the loss
        output = log_attention.exp().to(values.dtype) @ values  # eq. 16: [B, Sq, K]
        return output, log_attention


@dataclass(frozen=True)
class ParseSupervision:
    """What the training loss needs of a model's parse heads (eq. 18): the weights λ_enc and
    λ_dec of the heads it has, and which decoder position is supervised.  A model config says
    it with ``parse_supervision()``; a model without parse heads returns ``NO_PARSE_HEADS``."""

    lambda_enc: float
    lambda_dec: float
    dec_target: DecoderParseTarget


NO_PARSE_HEADS = ParseSupervision(lambda_enc=0.0, lambda_dec=0.0, dec_target="output")


def encoder_parse_targets(src_heads: Tensor) -> Tensor:
    """Targets for the encoder parse head: each subword's head index; padding (−1) is ignored."""
    return src_heads.masked_fill(src_heads < 0, IGNORE_INDEX)


def decoder_parse_targets(tgt_heads: Tensor, supervise: DecoderParseTarget = "output") -> Tensor:
    """Targets over the decoder positions (inputs BOS y1 .. yT) from tgt_heads [B, T] → [B, T+1].

    ``output`` (default, the authors' release): y_i (0-based i) is *predicted* at position i,
    which attends to position h (where y_h is predicted); the last position (it predicts EOS)
    is unsupervised.  ``input``: y_i is the *input* of position i+1, which attends to h+1;
    position 0 (BOS) is unsupervised.  Either way a token whose head lies in the
    future (h > i, hidden by the causal mask) is not supervised."""
    if supervise not in ("input", "output"):
        raise ValueError(f"dec_parse_target must be 'input' or 'output', got {supervise!r}")
    batch, length = tgt_heads.shape
    positions = torch.arange(length, device=tgt_heads.device)[None, :]  # [1, T]
    supervised = (tgt_heads >= 0) & (tgt_heads <= positions)
    shift = 1 if supervise == "input" else 0
    targets = torch.where(supervised, tgt_heads + shift, torch.full_like(tgt_heads, IGNORE_INDEX))
    unsupervised = torch.full((batch, 1), IGNORE_INDEX, dtype=targets.dtype, device=targets.device)
    parts = [unsupervised, targets] if supervise == "input" else [targets, unsupervised]
    return torch.cat(parts, dim=1)

