"""Greedy and beam search (shared by all models): the copy task end to end, beam 1 = greedy,
beam ≥ greedy by the length-penalised model score, batched = one sentence at a time."""

import pytest
import torch
import torch.nn.functional as F
from model_helpers import random_source, select, tiny_model

from models import build_model, default_config
from models.inputs import BOS_ID, EOS_ID, PAD_ID, Source
from models.search import beam_search, greedy_search, length_penalty, reorder

VOCAB = 16


def copy_batch(generator, batch=32):
    lengths = torch.randint(3, 9, (batch,), generator=generator)
    ids = torch.randint(4, VOCAB, (batch, int(lengths.max())), generator=generator)
    valid = torch.arange(ids.shape[1])[None] < lengths[:, None]
    ids = ids.masked_fill(~valid, PAD_ID)
    tgt_in = torch.cat([torch.full((batch, 1), BOS_ID), ids], dim=1)
    tgt_out = torch.cat([ids, torch.zeros(batch, 1, dtype=torch.long)], dim=1)
    tgt_out[torch.arange(batch), lengths] = EOS_ID
    return Source(ids=ids, lengths=lengths, depth=torch.zeros_like(ids)), tgt_in, tgt_out


@pytest.fixture(scope="module")
def copy_model():
    """The Annotated Transformer's smallest end-to-end test: learn to copy the source."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    model = build_model(default_config("transformer", num_encoder_layers=2, num_decoder_layers=2, d_model=64,
                                       num_heads=4, d_ff=128, dropout=0.0), VOCAB, VOCAB)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(400):
        src, tgt_in, tgt_out = copy_batch(generator)
        loss = F.cross_entropy(model(src, tgt_in).logits.transpose(1, 2), tgt_out, ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def test_copy_task_is_learned_and_decoded(copy_model):
    src, _, _ = copy_batch(torch.Generator().manual_seed(123), batch=20)
    greedy = greedy_search(copy_model, src)
    beam = beam_search(copy_model, src, beam=4)
    expected = [src.ids[b, :n].tolist() for b, n in enumerate(src.lengths.tolist())]
    assert sum(h.tokens == e for h, e in zip(greedy, expected)) >= 15  # 18 here; untrained: 0
    assert sum(h[0].tokens == e for h, e in zip(beam, expected)) >= 15


def test_beam_is_at_least_as_good_as_greedy_by_model_score(copy_model):
    for seed in range(3):
        src, _, _ = copy_batch(torch.Generator().manual_seed(seed), batch=16)
        greedy = greedy_search(copy_model, src)
        beam = beam_search(copy_model, src, beam=4)
        for g, b in zip(greedy, beam):
            assert b[0].score >= g.score - 1e-5
            assert len(b) == 4 and all(x.score >= y.score for x, y in zip(b, b[1:]))


@pytest.mark.parametrize("variant", ["transformer", "transformer_rel", "dbsa", "deprel"])
def test_beam_of_one_equals_greedy(variant):
    model = tiny_model(variant)
    src = random_source([6, 2, 5, 4], seed=3)
    greedy = greedy_search(model, src, alpha=0.0, max_len_b=5)  # without a length penalty the exact
    beam = beam_search(model, src, beam=1, alpha=0.0, max_len_b=5)  # stop of beam 1 is greedy's stop
    for g, b in zip(greedy, beam):
        assert g.tokens == b[0].tokens
        assert abs(g.score - b[0].score) < 1e-4


@pytest.mark.parametrize("variant", ["transformer", "deprel"])
def test_batched_search_equals_one_sentence_at_a_time(variant):
    model = tiny_model(variant)
    src = random_source([7, 3, 5], seed=4)
    batched_greedy = greedy_search(model, src)
    batched_beam = beam_search(model, src, beam=3)
    for b in range(3):
        alone = select(src, b)
        assert greedy_search(model, alone)[0].tokens == batched_greedy[b].tokens
        assert [h.tokens for h in beam_search(model, alone, beam=3)[0]] == [h.tokens for h in batched_beam[b]]


def test_maximum_length_is_relative_to_the_source_and_forces_eos():
    model = tiny_model("transformer")
    src = random_source([2, 6], seed=5)
    for hyp, n in zip(greedy_search(model, src, max_len_a=1.0, max_len_b=1), [2, 6]):
        assert len(hyp.tokens) <= n  # n + 1 tokens at most, the last one EOS
    for hyps, n in zip(beam_search(model, src, beam=2, max_len_a=1.0, max_len_b=1), [2, 6]):
        assert hyps and all(len(h.tokens) <= n for h in hyps)


def test_length_penalty_of_wu_et_al():
    assert length_penalty(1, 0.6) == 1.0
    assert abs(length_penalty(7, 0.6) - 2 ** 0.6) < 1e-9
    assert length_penalty(10, 0.0) == 1.0


def test_reorder_selects_rows_in_nested_state():
    state = {"a": [torch.arange(3), (torch.arange(6).view(3, 2),)], "n": 5}
    out = reorder(state, torch.tensor([2, 0]))
    assert out["a"][0].tolist() == [2, 0] and out["a"][1][0].tolist() == [[4, 5], [0, 1]] and out["n"] == 5


class LateBloomer:
    """A scripted model: at the first step EOS (log p −0.5) beats token 4 (−0.6); after 4,
    token 4 again costs almost nothing until EOS at length 10.  With α = 0.6 the long
    hypothesis ends with a better score (−0.6 / lp(10) ≈ −0.35 > −0.5), which a stop that
    scores alive hypotheses at their current length never sees."""

    def encode(self, src):
        return src.ids

    def start_state(self, encoded):
        return torch.zeros(encoded.shape[0], dtype=torch.long)

    def step(self, encoded, state, tokens):
        log_probs = torch.full((len(state), 8), -20.0)
        for row, length in enumerate(state.tolist()):
            if length == 0:
                log_probs[row, EOS_ID], log_probs[row, 4] = -0.5, -0.6
            elif length < 9:
                log_probs[row, 4], log_probs[row, EOS_ID] = -1e-4, -8.0
            else:
                log_probs[row, EOS_ID] = -1e-4
        return log_probs, state + 1


def test_beam_stop_is_exact_with_a_length_penalty():
    src = Source(ids=torch.ones(1, 3, dtype=torch.long), lengths=torch.tensor([3]))
    best = beam_search(LateBloomer(), src, beam=1, alpha=0.6, max_len_a=0.0, max_len_b=12)[0][0]
    assert best.tokens == [4] * 9
    assert best.score == pytest.approx(best.log_prob / length_penalty(10, 0.6))
    assert best.score > -0.5  # better than the hypothesis that ended first
