"""The Transformer family: causality, padding invariance, incremental decoding, config errors."""

import pytest
import torch
from model_helpers import TGT_VOCAB, TRANSFORMERS, random_source, random_target, select, tiny_model

from models import MODELS, build_model, default_config
from models.inputs import ModelOutput, Packing, Source

VARIANTS = sorted(TRANSFORMERS)


def close(a, b, atol=1e-5):
    """Equal where finite, and −inf in the same places (masked log-probabilities)."""
    assert torch.equal(torch.isinf(a), torch.isinf(b))
    finite = ~torch.isinf(a)
    torch.testing.assert_close(a[finite], b[finite], atol=atol, rtol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_decoder_output_and_parse_head_never_see_the_future(variant):
    model = tiny_model(variant)
    src = random_source([6, 4])
    tgt = random_target(2, 8)
    t = 4
    changed = tgt.clone()
    changed[:, t + 1:] = torch.randint(4, TGT_VOCAB, changed[:, t + 1:].shape)
    a, b = model(src, tgt), model(src, changed)
    close(a.logits[:, :t + 1], b.logits[:, :t + 1])
    assert not torch.allclose(a.logits[:, t + 1:], b.logits[:, t + 1:])
    if a.dec_parse_logprobs is not None:
        close(a.dec_parse_logprobs[:, :t + 1], b.dec_parse_logprobs[:, :t + 1])
        future = torch.triu(torch.ones(8, 8, dtype=torch.bool), diagonal=1)
        assert torch.isinf(a.dec_parse_logprobs[:, future]).all()  # probability 0 on the future


@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_does_not_change_any_output(variant):
    model = tiny_model(variant)
    src = random_source([7, 3, 5])
    tgt_lengths = [6, 2, 4]
    tgt = random_target(3, 6)
    for b, length in enumerate(tgt_lengths):
        tgt[b, length:] = 0  # PAD after the target
    batched = model(src, tgt)
    for b, length in enumerate(tgt_lengths):
        n = int(src.lengths[b])
        alone = model(select(src, b), tgt[b:b + 1, :length])
        close(batched.logits[b, :length], alone.logits[0])
        if alone.enc_parse_logprobs is not None:
            close(batched.enc_parse_logprobs[b, :n, :n], alone.enc_parse_logprobs[0])
            assert torch.isinf(batched.enc_parse_logprobs[b, :n, n:]).all()
        if alone.dec_parse_logprobs is not None:
            close(batched.dec_parse_logprobs[b, :length, :length], alone.dec_parse_logprobs[0])


def packed_rows(rows: list[list[tuple[int, int]]], seed: int = 0):
    """Random sentences ((source length, target length incl. BOS) each) packed into rows:
    the packed Source and target, the target's Packing, and each sentence alone."""
    width = {side: max(sum(pair[i] for pair in row) for row in rows) for i, side in enumerate(("src", "tgt"))}
    ids = {side: torch.zeros(len(rows), width[side], dtype=torch.long) for side in width}
    depth = torch.zeros(len(rows), width["src"], dtype=torch.long)
    sentence = {side: torch.full((len(rows), width[side]), -1) for side in width}
    position = {side: torch.zeros(len(rows), width[side], dtype=torch.long) for side in width}
    alone = []
    for r, row in enumerate(rows):
        start = {"src": 0, "tgt": 0}
        for k, (n, m) in enumerate(row):
            src = random_source([n], seed=seed + 10 * r + k)
            tgt = random_target(1, m, seed=seed + 10 * r + k)
            alone.append((src, tgt))
            for side, values in (("src", src.ids[0]), ("tgt", tgt[0])):
                span = slice(start[side], start[side] + len(values))
                ids[side][r, span], sentence[side][r, span] = values, k
                position[side][r, span] = torch.arange(len(values))
                start[side] = span.stop
            depth[r, start["src"] - n : start["src"]] = src.depth[0]
    packing = {side: Packing(sentence=sentence[side], position=position[side]) for side in width}
    source = Source(ids=ids["src"], lengths=(sentence["src"] >= 0).sum(1), depth=depth, packed=packing["src"])
    return source, ids["tgt"], packing["tgt"], alone


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_packed_row_computes_what_its_sentences_compute_alone(variant):
    """Training on packed rows (``batching.pack``) is training on the sentences themselves:
    attention (the DBSA parse heads' too) stays within each sentence and its own source,
    positions restart."""
    model = tiny_model(variant)
    src, tgt, tgt_packed, alone = packed_rows([[(4, 3), (3, 5), (2, 2)], [(6, 4)]])
    packed = model(src, tgt, tgt_packed=tgt_packed)
    for (r, k), (one_src, one_tgt) in zip([(0, 0), (0, 1), (0, 2), (1, 0)], alone):
        here_src, here_tgt = src.packed.sentence[r] == k, tgt_packed.sentence[r] == k
        one = model(one_src, one_tgt)
        close(packed.logits[r, here_tgt], one.logits[0])
        if one.enc_parse_logprobs is not None:  # log P(head) over the row: its own sentence only
            close(packed.enc_parse_logprobs[r][here_src][:, here_src], one.enc_parse_logprobs[0])
            assert torch.isinf(packed.enc_parse_logprobs[r][here_src][:, ~here_src]).all()
        if one.dec_parse_logprobs is not None:
            close(packed.dec_parse_logprobs[r][here_tgt][:, here_tgt], one.dec_parse_logprobs[0])
            assert torch.isinf(packed.dec_parse_logprobs[r][here_tgt][:, ~here_tgt]).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_incremental_decoding_equals_full_recomputation(variant):
    model = tiny_model(variant)
    src = random_source([6, 4, 5])
    tgt = random_target(3, 7)
    full = torch.log_softmax(model(src, tgt).logits, dim=-1)  # [B, T, V]
    encoded = model.encode(src)
    state = model.start_state(encoded)
    for t in range(tgt.shape[1]):
        log_probs, state = model.step(encoded, state, tgt[:, t])
        torch.testing.assert_close(log_probs, full[:, t], atol=1e-5, rtol=1e-5)


def test_models_table_and_paper_presets():
    assert set(MODELS) >= {"transformer", "transformer_rel", "dbsa", "deprel"}
    assert default_config("transformer_rel").use_rel
    assert default_config("deprel").use_dep
    dbsa = default_config("dbsa")
    assert (dbsa.p_enc, dbsa.p_dec) == (4, 4)
    paper = build_model(default_config("transformer"), 8000, 8000)
    # 6+6 layers, d 512, 8 heads, d_ff 2048, tied target embeddings, 8k+8k vocabularies
    attention = 4 * 512 * 512 + 3 * 512  # Q, K, V, O; no key bias (softmax cancels it)
    ffn = 512 * 2048 + 2048 + 2048 * 512 + 512
    encoder_layer = attention + ffn + 2 * 2 * 512
    decoder_layer = 2 * attention + ffn + 3 * 2 * 512
    expected = 2 * 8000 * 512 + 6 * encoder_layer + 6 * decoder_layer
    assert sum(p.numel() for p in paper.parameters()) == expected == 52_321_280
    out = paper.eval()(*_one_example())
    assert isinstance(out, ModelOutput) and out.logits.shape == (1, 3, 8000)


def _one_example():
    from models.inputs import Source
    return Source(ids=torch.tensor([[5, 6, 7, 8]]), lengths=torch.tensor([4])), torch.tensor([[2, 9, 10]])


@pytest.mark.parametrize(
    "name, overrides, message",
    [
        ("dbsa", {"p_enc": 7}, "p_enc=7 is outside layers 1..6"),
        ("dbsa", {"p_dec": 0}, "p_dec=0 is outside layers 1..6"),
        ("dbsa", {"p_enc": None, "p_dec": None}, "'dbsa' needs a parse head"),
        ("transformer", {"d_model": 500}, "d_model 500 is not divisible by num_heads 8"),
        ("transformer", {"use_rel": True}, "'transformer' is the plain baseline"),
        ("transformer_rel", {"k_clip": 0}, "k_clip must be ≥ 1"),
        ("deprel", {"dep_keys": False, "dep_values": False}, "use_dep needs dep_keys, dep_values or both"),
        ("deprel", {"use_dep": False}, "'deprel' needs use_dep=true"),
        ("transformer", {"dropout": 1.0}, "dropout must be in [0, 1)"),
    ],
)
def test_build_model_rejects_invalid_configurations(name, overrides, message):
    with pytest.raises(ValueError) as error:
        build_model(default_config(name, **overrides), 100, 100)
    assert message in str(error.value)


def test_unknown_model_or_key_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown model 'dbsa2'; available: transformer"):
        default_config("dbsa2")
    with pytest.raises(ValueError, match=r"unknown dbsa config key\(s\) \['p_encoder'\]"):
        default_config("dbsa", p_encoder=2)


def test_dbsa_encoder_only_and_decoder_only_are_configurations():
    enc_only = tiny_model("dbsa", p_dec=None)
    dec_only = tiny_model("dbsa", p_enc=None)
    src, tgt = random_source([5]), random_target(1, 4)
    a, b = enc_only(src, tgt), dec_only(src, tgt)
    assert a.enc_parse_logprobs is not None and a.dec_parse_logprobs is None
    assert b.enc_parse_logprobs is None and b.dec_parse_logprobs is not None


def test_pre_norm_and_untied_embeddings_build_and_run():
    model = tiny_model("transformer", pre_norm=True, tie_target_embeddings=False, absolute_positions=False)
    assert model.generator.weight is not model.tgt_embed.tokens.weight
    assert model(random_source([3]), random_target(1, 3)).logits.shape == (1, 3, TGT_VOCAB)


@pytest.mark.parametrize("embed_init", ["normal", "xavier"])
def test_token_embeddings_start_as_configured_with_a_zero_padding_row(embed_init):
    """fairseq's N(0, D^-1/2) or JoeyNMT's Xavier-uniform (±√(6 / (V + D))), for both sides and
    the tied output layer."""
    import math

    from models.transformer import Transformer, TransformerConfig

    torch.manual_seed(0)
    config = TransformerConfig(num_encoder_layers=1, num_decoder_layers=1, d_model=128, num_heads=4, d_ff=256,
                               embed_init=embed_init)
    model = Transformer(config, 3000, 2000)
    for table, vocab in ((model.src_embed.tokens.weight, 3000), (model.tgt_embed.tokens.weight, 2000)):
        assert torch.count_nonzero(table[0]) == 0
        rows = table[1:].detach()
        expected = 128 ** -0.5 if embed_init == "normal" else math.sqrt(2 / (vocab + 128))
        assert abs(float(rows.std()) - expected) < 0.03 * expected
        if embed_init == "xavier":
            assert float(rows.abs().max()) <= math.sqrt(6 / (vocab + 128))
    assert model.generator.weight is model.tgt_embed.tokens.weight


@pytest.mark.parametrize("variant", VARIANTS)
def test_share_all_embeddings_is_one_matrix_for_source_target_and_output(variant):
    """Vaswani et al. §3.4: one V×D matrix fewer than tying the target side only; a gradient
    from the source side and one from the output layer land in the same tensor."""
    from model_helpers import TINY

    name = "deprel" if variant.startswith("deprel") else variant
    settings = {**TINY, **TRANSFORMERS[variant]}
    tied = build_model(default_config(name, **settings), TGT_VOCAB, TGT_VOCAB)
    shared = build_model(default_config(name, **settings, share_all_embeddings=True), TGT_VOCAB, TGT_VOCAB)
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731 - shared tensors once
    assert count(tied) - count(shared) == TGT_VOCAB * settings["d_model"]
    assert shared.src_embed.tokens.weight is shared.tgt_embed.tokens.weight is shared.generator.weight
    with pytest.raises(ValueError, match="share_all_embeddings needs one vocabulary: the source has 40 subwords"):
        build_model(default_config(name, **settings, share_all_embeddings=True), 40, TGT_VOCAB)
    with pytest.raises(ValueError, match="share_all_embeddings ties the target embeddings too"):
        build_model(default_config(name, **settings, share_all_embeddings=True, tie_target_embeddings=False),
                    TGT_VOCAB, TGT_VOCAB)
