"""The training loss (Deguchi et al. eq. 18) as sums and global counts.

Label-smoothed token cross-entropy ``e_tok`` plus, for models with parse heads,
``λ_enc e_enc + λ_dec e_dec`` (cross-entropy of the parse attention towards each token's head;
decoder side only where the head is not in the future).  Every term is a sum divided by its
*global* count (all-reduced over DDP ranks), so k workers taking shares of a batch compute
exactly the gradient one worker would on the whole batch.  Imports torch and ``models/`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from models.dbsa import IGNORE_INDEX, ParseSupervision, decoder_parse_targets, encoder_parse_targets
from models.inputs import BOS_ID, EOS_ID, PAD_ID, ModelOutput, Source

if TYPE_CHECKING:
    from platform.data.tensors import Batch

def to_source(batch: Batch) -> Source:
    if batch.rows is not None:  # several sentences per row: the rows' used lengths
        lengths = (batch.rows.source.sentence >= 0).sum(dim=1)
        return Source(ids=batch.src_ids, lengths=lengths, depth=batch.src_depth, packed=batch.rows.source)
    return Source(ids=batch.src_ids, lengths=batch.src_lengths, depth=batch.src_depth,
                  tree_parent=batch.src_tree_parent)


def forward(model, batch: Batch, tgt_in: Tensor) -> ModelOutput:
    """The model's teacher-forced outputs on ``batch``, packed rows or one sentence per row."""
    if batch.rows is None:
        return model(to_source(batch), tgt_in)
    return model(to_source(batch), tgt_in, tgt_packed=batch.rows.target)


def teacher_forcing(batch: Batch) -> tuple[Tensor, Tensor]:
    """tgt_in = BOS y1..yn (PAD after), tgt_out = y1..yn EOS (PAD after): both [B, T+1]
    (packed rows: built by ``data.packing.collate_packed``, each sentence with its BOS and EOS)."""
    if batch.rows is not None:
        return batch.rows.tgt_in, batch.rows.tgt_out
    batch_size = batch.tgt_ids.shape[0]
    bos = torch.full((batch_size, 1), BOS_ID, dtype=batch.tgt_ids.dtype, device=batch.tgt_ids.device)
    tgt_in = torch.cat([bos, batch.tgt_ids], dim=1)
    tgt_out = torch.cat([batch.tgt_ids, torch.full_like(bos, PAD_ID)], dim=1)
    tgt_out[torch.arange(batch_size, device=tgt_out.device), batch.tgt_lengths] = EOS_ID
    return tgt_in, tgt_out


@dataclass
class LossSums:
    """Sums and counts of the three loss terms of one batch on one rank."""

    token_loss: Tensor  # label-smoothed
    token_nll: Tensor  # plain NLL (for dev_loss / perplexity)
    num_tokens: Tensor
    enc_loss: Tensor
    enc_count: Tensor
    dec_loss: Tensor
    dec_count: Tensor

    def counts(self) -> Tensor:
        return torch.stack([self.num_tokens, self.enc_count, self.dec_count]).float()

    def nonfinite(self, weights: ParseSupervision) -> Tensor:
        """1.0 if a loss term of the objective (one with a non-zero weight) is NaN/inf here, else 0.0."""
        pairs = ((self.enc_loss, weights.lambda_enc), (self.dec_loss, weights.lambda_dec))
        terms = [self.token_loss] + [loss for loss, weight in pairs if weight]
        return (~torch.isfinite(torch.stack([t.detach().float() for t in terms]))).any().float()


def parse_targets(batch: Batch, model_config) -> tuple[Tensor, Tensor]:
    """The parse heads' targets of ``batch``: encoder [B, S], decoder [B, T+1] (models/dbsa.py)."""
    supervise = model_config.parse_supervision().dec_target
    return encoder_parse_targets(batch.src_heads), decoder_parse_targets(batch.tgt_heads, supervise)


def token_losses(logits: Tensor, targets: Tensor, label_smoothing: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy and plain NLL of [B, T, V] ``logits`` (any dtype:
    computed in float32) against [B, T] ``targets``, padding ignored."""
    logits = logits.float().reshape(-1, logits.shape[-1])  # [B·T, V]
    targets = targets.reshape(-1)
    token_loss = F.cross_entropy(logits, targets, ignore_index=PAD_ID, label_smoothing=label_smoothing, reduction="sum")
    token_nll = F.cross_entropy(logits.detach(), targets, ignore_index=PAD_ID, reduction="sum")
    return token_loss, token_nll


def loss_sums(output: ModelOutput, batch: Batch, tgt_out: Tensor, label_smoothing: float, model_config) -> LossSums:
    """The loss terms' sums and counts of one batch."""
    token_loss, token_nll = token_losses(output.logits, tgt_out, label_smoothing)
    targets = tgt_out.reshape(-1)
    zero = token_loss.new_zeros(())
    enc_targets, dec_targets = parse_targets(batch, model_config)
    enc_loss, enc_count = _parse_loss(output.enc_parse_logprobs, enc_targets, zero)
    dec_loss, dec_count = _parse_loss(output.dec_parse_logprobs, dec_targets, zero)
    return LossSums(token_loss, token_nll, (targets != PAD_ID).sum(), enc_loss, enc_count, dec_loss, dec_count)


def loss_counts(batch: Batch, model_config) -> Tensor:
    """[3] float: target tokens (incl. EOS), supervised encoder and decoder parse positions of
    ``batch`` — the counts ``loss_sums`` finds, known before the forward pass, so an update that
    accumulates several batches normalises each by the whole update's counts.  Counted where the
    batch is, so a batch on the GPU costs no wait for it."""
    enc_targets, dec_targets = parse_targets(batch, model_config)
    num_tokens = batch.tgt_lengths.sum() + batch.tgt_lengths.numel()  # Batch.num_tokens, on the batch's device
    return torch.stack([num_tokens, (enc_targets != IGNORE_INDEX).sum(), (dec_targets != IGNORE_INDEX).sum()]).float()


def _parse_loss(logprobs: Tensor | None, targets: Tensor, zero: Tensor) -> tuple[Tensor, Tensor]:
    """Eq. 17: −Σ log A_parse[i, head(i)] over supervised positions."""
    if logprobs is None:
        return zero, zero.long()
    if logprobs.shape[1] != targets.shape[1]:  # decoder targets cover BOS..y_T, logits may be shorter
        targets = targets[:, : logprobs.shape[1]]
    flat = logprobs.float().reshape(-1, logprobs.shape[-1])
    loss = F.nll_loss(flat, targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum")
    return loss, (targets != IGNORE_INDEX).sum()


def combine(sums: LossSums, global_counts: Tensor, model_config, world_size: int) -> Tensor:
    """e_tok + λ_enc e_enc + λ_dec e_dec, each normalised by its global count; × world size
    because DDP averages gradients over ranks."""
    tokens, enc, dec = (c.clamp(min=1.0) for c in global_counts)
    loss = sums.token_loss / tokens
    weights = model_config.parse_supervision()
    if weights.lambda_enc:
        loss = loss + weights.lambda_enc * sums.enc_loss / enc
    if weights.lambda_dec:
        loss = loss + weights.lambda_dec * sums.dec_loss / dec
    return loss * world_size
