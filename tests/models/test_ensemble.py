"""An ensemble decodes with the mean of its members' next-token probabilities (models/ensemble.py);
an ensemble of one is its member."""

import math

import torch
from model_helpers import random_source, random_target, tiny_model

from models.ensemble import Ensemble
from models.search import beam_search, greedy_search


def test_an_ensemble_of_one_decodes_exactly_as_its_model():
    model, src = tiny_model("dbsa"), random_source([5, 3, 7])
    alone = Ensemble([model])
    assert [h.tokens for h in greedy_search(alone, src)] == [h.tokens for h in greedy_search(model, src)]
    together = beam_search(alone, src, beam=3)
    for mine, theirs in zip(together, beam_search(model, src, beam=3)):
        assert [(h.tokens, h.log_prob) for h in mine] == [(h.tokens, h.log_prob) for h in theirs]


def test_each_step_and_the_teacher_forced_output_average_the_members_probabilities():
    members = [tiny_model("transformer", seed=0), tiny_model("dbsa", seed=1), tiny_model("transformer_rel", seed=2)]
    ensemble, src = Ensemble(members), random_source([4, 6])
    tokens = torch.tensor([2, 2])
    with torch.no_grad():
        log_probs, _ = ensemble.step(ensemble.encode(src), ensemble.start_state(ensemble.encode(src)), tokens)
        each = [m.step(m.encode(src), m.start_state(m.encode(src)), tokens)[0] for m in members]  # [B, V] each
        torch.testing.assert_close(log_probs.exp(), sum(p.exp() for p in each) / 3)
        assert not torch.allclose(each[0], each[1])  # the members really differ
        tgt = random_target(2, 5)
        logits = ensemble(src, tgt).logits  # [B, T, V]
        probs = [torch.softmax(m(src, tgt).logits, dim=-1) for m in members]
        torch.testing.assert_close(torch.softmax(logits, dim=-1), sum(probs) / 3)
        assert math.isclose(float(log_probs.exp().sum(-1)[0]), 1.0, rel_tol=1e-5)
