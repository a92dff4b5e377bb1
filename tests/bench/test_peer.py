"""benchmarks/peer_joeynmt.py's half that needs no JoeyNMT: the peer gets the same sentences,
pieces and target tokens per update, and the platform's own setting in JoeyNMT's terms."""

import json

import numpy as np
import pytest
import sentencepiece as spm
from helpers import benchmark_module

from platform.data import dataset as ds


@pytest.fixture(scope="module")
def peer():
    return benchmark_module("peer_joeynmt")


def joeynmt_batches(examples, size: int, seed: int = 1) -> list[np.ndarray]:
    """JoeyNMT 2.3.0's TokenBatchSampler written out: random order, a batch closed once
    ``max(src + 1, trg + 1) × sentences`` reaches ``size``."""
    batches, batch, widest = [], [], 0
    for index in np.random.default_rng(seed).permutation(len(examples)):
        batch.append(index)
        widest = max(widest, int(max(examples.src_lengths[index], examples.tgt_lengths[index])) + 1)
        if widest * len(batch) >= size:
            batches.append(np.array(batch))
            batch, widest = [], 0
    return batches


def test_the_peer_batch_size_gives_the_platforms_target_tokens_per_update(peer, demo_dataset):
    examples = ds.read_examples(demo_dataset, "train")
    config = peer.platform_config(1, ["batching.max_tokens=600"])
    wanted = peer.platform_tokens_per_update(demo_dataset, config)
    size = peer.peer_batch_size(demo_dataset, wanted)

    def mean_target(size: int) -> float:
        return float(np.mean([(examples.tgt_lengths[b] + 1).sum() for b in joeynmt_batches(examples, size)]))

    assert mean_target(size) >= wanted > mean_target(size - 1)  # the smallest size that reaches it
    assert size > 600  # random lengths pad more than the platform's sorted batches


def test_the_peer_reads_the_same_sentences_and_pieces(peer, demo_dataset, tmp_path):
    langs = peer.export_for_joeynmt(demo_dataset, tmp_path)
    meta = ds.read_meta(demo_dataset)
    assert langs == {"src": meta["src_lang"], "tgt": meta["tgt_lang"]}
    dev = ds.read_examples(demo_dataset, "dev")
    assert (tmp_path / f"dev.{meta['tgt_lang']}").read_text(encoding="utf-8").splitlines() == dev.texts["tgt_text"]
    for side in ("src", "tgt"):
        model = spm.SentencePieceProcessor(model_file=str(demo_dataset / f"{side}.model"))
        vocab = (tmp_path / f"{side}.vocab").read_text(encoding="utf-8").splitlines()
        assert vocab[:4] == ["<unk>", "<pad>", "<s>", "</s>"]  # JoeyNMT's order of its specials
        assert sorted(vocab) == sorted(model.id_to_piece(i) for i in range(model.get_piece_size()))


def test_joeynmt_gets_the_platforms_resolved_setting(peer, tmp_path):
    config = peer.platform_config(2, ["optim.clip_norm=1.0", "model.dropout=0.2"])
    cfg = peer.joeynmt_config(config, tmp_path, {"src": "sov", "tgt": "svo"}, tmp_path / "m", [200, 400], 3851)
    training, model = cfg["training"], cfg["model"]
    assert cfg["random_seed"] == 2 and training["batch_size"] == 3851 and training["updates"] == 400
    assert training["validation_freq"] == 200 and training["normalization"] == "tokens"
    assert (training["learning_rate"], training["learning_rate_warmup"]) == (config.optim.lr, config.optim.warmup_steps)
    assert training["adam_betas"] == list(config.optim.betas) and training["clip_grad_norm"] == 1.0
    assert training["label_smoothing"] == config.optim.label_smoothing
    encoder = model["encoder"]
    assert (encoder["num_layers"], encoder["hidden_size"], encoder["num_heads"], encoder["ff_size"]) == (
        config.model.num_encoder_layers, config.model.d_model, config.model.num_heads, config.model.d_ff)
    assert encoder["dropout"] == 0.2 and encoder["layer_norm"] == "post" and model["tied_softmax"] is True
    unclipped = peer.joeynmt_config(peer.platform_config(1, ["optim.clip_norm=0"]), tmp_path, {"src": "a", "tgt": "b"},
                                    tmp_path / "m", [200], 100)
    assert unclipped["training"]["clip_grad_norm"] is None  # 0 disables clipping on both sides
    assert (model["embed_initializer"], model["embed_init_weight"]) == ("normal", config.model.d_model ** -0.5)
    xavier_config = peer.platform_config(1, ["model.embed_init=xavier"])
    xavier = peer.joeynmt_config(xavier_config, tmp_path, {"src": "a", "tgt": "b"}, tmp_path / "m", [200], 100)
    assert xavier["model"]["embed_initializer"] == "xavier_uniform"  # JoeyNMT's own default


def test_the_table_gives_mean_and_spread_over_seeds(peer):
    lines = [{"label": "a", "seed": s, "update": 200, "dev_bleu": b, "tokens_per_s": 1000.0}
             for s, b in ((1, 10.0), (2, 20.0))]
    table = peer.table(lines + [json.loads(json.dumps({**lines[0], "label": "b"}))])
    assert "| a | 2 | 15.0 ± 5.0 | 1,000 |" in table and "| b | 1 | 10.0 | 1,000 |" in table
