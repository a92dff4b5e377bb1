"""Several trained translators decoding as one (fairseq's ``--path a.pt:b.pt``).

At every decoding step the members' next-token distributions are averaged, as fairseq's
``EnsembleModel`` does:

    log P_ens(y_t | y_<t, X) = log (1/M) Σ_m P_m(y_t | y_<t, X)
                             = logsumexp_m log P_m(y_t | y_<t, X) − log M

so greedy and beam search (``models.search``) run unchanged over the ensemble, which has the
same three methods as a model (``encode``, ``start_state``, ``step``).  Teacher-forced, its
``forward`` gives the same average over whole target sequences, so the loss an evaluation
reports is the ensemble's.  The members must share the target vocabulary (the caller checks);
an ensemble of one decodes exactly as its member.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from models.inputs import ModelOutput, Source


class Ensemble(nn.Module):
    """The members' probabilities averaged at every target position."""

    def __init__(self, members: list[nn.Module]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one model")
        self.members = nn.ModuleList(members)

    def encode(self, src: Source) -> list[Any]:
        return [member.encode(src) for member in self.members]

    def start_state(self, encoded: list[Any]) -> list[Any]:
        return [member.start_state(e) for member, e in zip(self.members, encoded)]

    def step(self, encoded: list[Any], state: list[Any], tokens: Tensor) -> tuple[Tensor, list[Any]]:
        """tokens [B] → the averaged log-probabilities [B, V] and every member's new state."""
        steps = [member.step(e, s, tokens) for member, e, s in zip(self.members, encoded, state)]
        return self.average([log_probs for log_probs, _ in steps]), [s for _, s in steps]

    def forward(self, src: Source, tgt_in: Tensor) -> ModelOutput:
        """Teacher-forced: [B, T, V] averaged log-probabilities as the logits (their softmax is
        the ensemble's distribution); no parse heads (those are each member's own)."""
        outputs = [member(src, tgt_in) for member in self.members]
        return ModelOutput(logits=self.average([torch.log_softmax(o.logits.float(), dim=-1) for o in outputs]))

    def average(self, log_probs: list[Tensor]) -> Tensor:
        """[..., V] log of the mean of the members' probabilities (logsumexp − log M)."""
        if len(log_probs) == 1:
            return log_probs[0]
        return torch.logsumexp(torch.stack(log_probs), dim=0) - math.log(len(log_probs))
