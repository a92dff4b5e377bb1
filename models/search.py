"""Greedy and batched beam search, shared by every model (Transformers and RNN/tree models).

A model takes part through three methods:

    encoded = model.encode(src)                      # anything with batch-first tensors
    state = model.start_state(encoded)               # ditto (cached keys/values, RNN state)
    log_probs, state = model.step(encoded, state, tokens)   # tokens [B] → log-probs [B, V]

Beams are laid out as ``B × beam`` rows; ``reorder`` index-selects every tensor found in
dataclasses, dicts, lists and tuples along dimension 0, so models need no reorder code.
Scores use the length penalty of Wu et al. 2016: ``log P(Y|X) / ((5 + |Y|) / 6)^α``
(paper settings: beam 4, α = 0.6), where |Y| counts EOS.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from models.inputs import BOS_ID, EOS_ID, Source


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS, without EOS
    log_prob: float  # log P(Y|X) including EOS
    score: float  # log_prob / length penalty


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    """Wu et al. 2016, eq. 14: ((5 + |Y|) / 6)^α."""
    return ((5 + length) / 6) ** alpha


def max_output_length(src: Source, max_len_a: float, max_len_b: int) -> Tensor:
    """[B] the longest output allowed per sentence: a·|X| + b tokens (EOS included)."""
    return (src.lengths.float() * max_len_a + max_len_b).long().clamp(min=1)


def reorder(obj: Any, order: Tensor) -> Any:
    """Select rows ``order`` (dimension 0) of every tensor inside ``obj``."""
    if isinstance(obj, Tensor):
        return obj.index_select(0, order)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: reorder(getattr(obj, f.name), order)
                                           for f in dataclasses.fields(obj)})
    if isinstance(obj, dict):
        return {key: reorder(value, order) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(reorder(value, order) for value in obj)
    return obj


@torch.no_grad()
def greedy_search(model, src: Source, *, alpha: float = 0.6, max_len_a: float = 2.0, max_len_b: int = 10,
                  bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> list[Hypothesis]:
    """Argmax decoding; every sentence stops at EOS or its maximum length (then EOS is forced)."""
    batch = src.ids.shape[0]
    limit = max_output_length(src, max_len_a, max_len_b)  # [B]
    encoded = model.encode(src)
    state = model.start_state(encoded)
    tokens = torch.full((batch,), bos_id, dtype=torch.long, device=src.ids.device)
    outputs = [[] for _ in range(batch)]
    log_probs_sum = torch.zeros(batch, device=src.ids.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.ids.device)
    for step in range(int(limit.max())):
        log_probs, state = model.step(encoded, state, tokens)  # [B, V]
        forced = step + 1 >= limit  # the last allowed token must be EOS
        log_probs[forced] = _only(log_probs[forced], eos_id)
        chosen = log_probs.argmax(dim=-1)  # [B]
        chosen_log_prob = log_probs.gather(1, chosen[:, None])[:, 0]  # [B]
        log_probs_sum += torch.where(finished, torch.zeros_like(log_probs_sum), chosen_log_prob)
        for b in torch.nonzero(~finished & (chosen != eos_id)).flatten().tolist():
            outputs[b].append(int(chosen[b]))
        finished |= chosen == eos_id
        if bool(finished.all()):
            break
        tokens = chosen
    return [Hypothesis(tokens=out, log_prob=float(lp), score=float(lp) / length_penalty(len(out) + 1, alpha))
            for out, lp in zip(outputs, log_probs_sum)]


@torch.no_grad()
def beam_search(model, src: Source, *, beam: int = 4, alpha: float = 0.6, max_len_a: float = 2.0,
                max_len_b: int = 10, bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> list[list[Hypothesis]]:
    """Batched beam search; returns each sentence's ``beam`` best hypotheses, best first.

    At every step the ``2 × beam`` best continuations of each sentence are ranked; those
    ending in EOS among the top ``beam`` are finished (scored with the length penalty), the
    best ``beam`` others stay alive.  A sentence is done when it has ``beam`` finished
    hypotheses and the best alive one can no longer beat the ``beam``-th of them.  The stop
    is exact: "can no longer beat" uses the best *final* score the
    alive hypothesis could still reach (``_best_final_score``: with α > 0 a longer hypothesis
    is divided by a larger penalty, so its score can still rise although its log-probability
    only falls), not its score at the current length (Hugging Face's ``early_stopping=False``
    heuristic, which can stop before a live hypothesis overtakes the finished ones).  With
    ``beam=1`` and ``alpha=0`` this is exactly greedy search (with α > 0 beam 1 may continue
    past greedy's EOS when a longer hypothesis can still score better).  EOS is forced at the maximum length."""
    batch, device = src.ids.shape[0], src.ids.device
    sentence_limit = max_output_length(src, max_len_a, max_len_b)  # [B]
    limit = sentence_limit.repeat_interleave(beam)  # [B·beam]
    rows = torch.arange(batch, device=device).repeat_interleave(beam)  # sentence of each row
    encoded = model.encode(src)
    encoded = reorder(encoded, rows)
    state = model.start_state(encoded)
    tokens = torch.full((batch * beam,), bos_id, dtype=torch.long, device=device)
    scores = torch.full((batch, beam), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: keep one alive
    histories = torch.zeros(batch * beam, 0, dtype=torch.long, device=device)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    for step in range(int(limit.max())):
        log_probs, state = model.step(encoded, state, tokens)  # [B·beam, V]
        forced = step + 1 >= limit
        log_probs[forced] = _only(log_probs[forced], eos_id)
        vocab = log_probs.shape[-1]
        candidates = (scores.view(-1, 1) + log_probs).view(batch, beam * vocab)  # [B, beam·V]
        top_scores, top_index = candidates.topk(min(2 * beam, beam * vocab), dim=-1)  # [B, 2·beam]
        origin, token = top_index // vocab, top_index % vocab
        _collect_finished(finished, done, top_scores, origin, token, histories, beam, eos_id, alpha, step)
        alive_scores, alive_pick = _best_alive(top_scores, token, eos_id, beam)  # [B, beam]
        best_possible = _best_final_score(alive_scores[:, 0], step, sentence_limit, alpha)  # [B]
        _stop_when_unbeatable(finished, done, best_possible, beam)
        if bool(done.all()):
            break
        chosen_origin = origin.gather(1, alive_pick)  # [B, beam]
        order = (torch.arange(batch, device=device)[:, None] * beam + chosen_origin).view(-1)
        tokens = token.gather(1, alive_pick).view(-1)
        histories = torch.cat([histories.index_select(0, order), tokens[:, None]], dim=1)
        scores = alive_scores.masked_fill(done[:, None], float("-inf"))
        # ``order`` only permutes the beams *within* a sentence, and the beams of a sentence share
        # identical encoder rows, so ``encoded`` needs no reordering
        state = reorder(state, order)
    return [sorted(hyps, key=lambda h: -h.score)[:beam] for hyps in finished]


def best_hypotheses(model, src: Source, *, beam: int, **options: Any) -> list[Hypothesis]:
    """Each sentence's best hypothesis: greedy search when ``beam == 1``, else beam search's top
    one; ``options`` are the searches' (``alpha``, ``max_len_a``, ``max_len_b``)."""
    if beam == 1:
        return greedy_search(model, src, **options)
    return [hypotheses[0] for hypotheses in beam_search(model, src, beam=beam, **options)]


def _only(log_probs: Tensor, token: int) -> Tensor:
    forced = torch.full_like(log_probs, float("-inf"))
    forced[:, token] = log_probs[:, token]
    return forced


def _collect_finished(finished, done, top_scores, origin, token, histories, beam, eos_id, alpha, step) -> None:
    """Finish the EOS continuations ranked within the top ``beam`` of each unfinished sentence."""
    ends = (token == eos_id) & (top_scores > float("-inf"))
    ends[:, beam:] = False
    for b, k in torch.nonzero(ends).tolist():
        if done[b]:
            continue
        row = b * beam + int(origin[b, k])
        log_prob = float(top_scores[b, k])
        finished[b].append(Hypothesis(tokens=histories[row].tolist(), log_prob=log_prob,
                                      score=log_prob / length_penalty(step + 1, alpha)))


def _best_final_score(alive_log_prob: Tensor, step: int, limit: Tensor, alpha: float) -> Tensor:
    """[B] an upper bound, reached in the best case, of the final score of an alive hypothesis
    with log-probability ``alive_log_prob`` (≤ 0) after ``step + 1`` tokens: it finishes with
    |Y| ∈ [step + 2, limit] (EOS included) and log P ≤ ``alive_log_prob``, so its score is at
    most ``alive_log_prob / lp(|Y|)``, largest at |Y| = limit for α ≥ 0 (at step + 2 for α < 0)."""
    longest = limit.to(alive_log_prob.dtype) if alpha >= 0 else torch.full_like(alive_log_prob, step + 2.0)
    return alive_log_prob / length_penalty(longest.clamp(min=step + 2.0), alpha)


def _stop_when_unbeatable(finished, done, best_possible: Tensor, beam: int) -> None:
    """A sentence is done once its ``beam``-th best finished score ≥ the best alive score."""
    for b, hyps in enumerate(finished):
        if not done[b] and len(hyps) >= beam:
            kth = sorted((h.score for h in hyps), reverse=True)[beam - 1]
            if kth >= float(best_possible[b]):
                done[b] = True


def _best_alive(top_scores: Tensor, token: Tensor, eos_id: int, beam: int) -> tuple[Tensor, Tensor]:
    """The ``beam`` best non-EOS continuations per sentence: (scores, positions in the top list)."""
    masked = top_scores.masked_fill(token == eos_id, float("-inf"))
    return masked.topk(beam, dim=-1)
