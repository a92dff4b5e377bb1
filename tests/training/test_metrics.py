"""Translation metrics: sacrebleu on detokenized text."""

import pytest
import sacrebleu

from platform.training.metrics import detokenizer, translation_scores


def test_bleu_matches_sacrebleu_on_detokenized_text():
    hyps = ["it 's a pen .", "he was there ."]
    refs = ["it 's a pen .", "he is there ."]
    scores = translation_scores(hyps, refs, "en")
    direct = sacrebleu.corpus_bleu(["it's a pen.", "he was there."], [["it's a pen.", "he is there."]])
    assert scores.bleu == pytest.approx(direct.score)
    assert scores.bleu_tok == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score)
    assert detokenizer("ja")("これ は ペン です 。") == "これはペンです。"
    assert detokenizer("svo")("ze bla .") == "ze bla ."
