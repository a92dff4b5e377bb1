"""Dev/test evaluation on one process: loss, parse-head UAS (teacher-forced) and decoding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from models.search import best_hypotheses
from platform.training.config import TrainConfig
from platform.training.context import Context
from platform.training.loss import loss_sums, parse_targets, teacher_forcing, to_source
from platform.training.metrics import head_accuracy, translation_scores

if TYPE_CHECKING:
    from platform.data.examples import ParquetExamples
    from platform.data.subwords import SubwordModel
    from platform.data.tensors import Batch


@dataclass
class Evaluation:
    metrics: dict[str, float]
    hypotheses: list[str]  # tokenized (words separated by spaces), in dev order
    signature: str


@torch.no_grad()
def evaluate(model: nn.Module, examples: ParquetExamples, config: TrainConfig, tgt_model: SubwordModel, tgt_lang: str,
             ctx: Context, prefix: str = "dev", beam: int | None = None) -> Evaluation:
    """Loss, UAS of parse heads (teacher-forced) and decoding of ``examples`` (first
    ``eval.max_sentences``), on one process (rank 0): pass the unwrapped model, not DDP."""
    model.eval()
    limit = min(len(examples), config.eval.max_sentences or len(examples))
    order = np.argsort(examples.src_lengths[:limit], kind="stable")  # similar lengths batch well
    totals = {"nll": 0.0, "tokens": 0, "enc": [0, 0], "dec": [0, 0]}
    hypotheses: dict[int, str] = {}
    for indices in _eval_batches(order, examples, config.eval.max_tokens):
        batch = examples.collate(indices).to(ctx.device)
        _score_batch(model, batch, totals, config.model)
        for index, text in zip(indices.tolist(), _decode(model, batch, config, tgt_model, beam)):
            hypotheses[index] = text
    ordered = [hypotheses[i] for i in range(limit)]
    references = examples.texts["tgt_text"][:limit]
    scores = translation_scores(ordered, references, tgt_lang)
    metrics = {f"{prefix}_loss": totals["nll"] / max(totals["tokens"], 1), **scores.as_metrics(prefix)}
    for side in ("enc", "dec"):
        correct, counted = totals[side]
        if counted:
            metrics[f"{prefix}_uas_{side}"] = correct / counted
    return Evaluation(metrics=metrics, hypotheses=ordered, signature=scores.signature)


def _eval_batches(order: np.ndarray, examples: ParquetExamples, max_tokens: int):
    start = 0
    while start < len(order):
        end, longest = start, 0
        while end < len(order):
            longest = max(longest, int(max(examples.src_lengths[order[end]], examples.tgt_lengths[order[end]])) + 1)
            if end > start and longest * (end - start + 1) > max_tokens:
                break
            end += 1
        yield order[start:end]
        start = end


def _score_batch(model: nn.Module, batch: Batch, totals: dict, model_config) -> None:
    tgt_in, tgt_out = teacher_forcing(batch)
    output = model(to_source(batch), tgt_in)
    sums = loss_sums(output, batch, tgt_out, label_smoothing=0.0, model_config=model_config)
    enc_targets, dec_targets = parse_targets(batch, model_config)
    totals["nll"] += float(sums.token_nll)
    totals["tokens"] += int(sums.num_tokens)
    for side, logprobs, targets in (("enc", output.enc_parse_logprobs, enc_targets),
                                    ("dec", output.dec_parse_logprobs, dec_targets)):
        if logprobs is not None:
            correct, counted = head_accuracy(logprobs, targets[:, : logprobs.shape[1]])
            totals[side][0] += correct
            totals[side][1] += counted


def _decode(model: nn.Module, batch: Batch, config: TrainConfig, tgt_model: SubwordModel,
            beam: int | None) -> list[str]:
    hypotheses = best_hypotheses(model, to_source(batch), beam=beam or config.eval.beam, alpha=config.eval.alpha,
                                 max_len_a=config.eval.max_len_a, max_len_b=config.eval.max_len_b)
    return [tgt_model.decode(h.tokens) for h in hypotheses]
