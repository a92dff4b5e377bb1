"""Small seeded models and batches for the model tests (pure torch)."""

from __future__ import annotations

import torch

from models import build_model, default_config
from models.inputs import Source

TINY = dict(num_encoder_layers=2, num_decoder_layers=2, d_model=32, num_heads=4, d_ff=64, dropout=0.0)
TRANSFORMERS = {
    "transformer": {},
    "transformer_rel": {"k_clip": 3},
    "dbsa": {"p_enc": 1, "p_dec": 2},
    "deprel": {"use_rel": True, "k_clip": 3},  # dep+rel: every relative term at once
    "deprel_keys_only": {"dep_values": False},  # the fused-kernel path (key bias only)
}
SRC_VOCAB, TGT_VOCAB = 40, 50


def tiny_model(variant: str, seed: int = 0, **overrides):
    name = "deprel" if variant.startswith("deprel") else variant
    torch.manual_seed(seed)
    config = default_config(name, **{**TINY, **TRANSFORMERS[variant], **overrides})
    return build_model(config, SRC_VOCAB, TGT_VOCAB).eval()


def random_source(lengths, seed: int = 0) -> Source:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    width = int(lengths.max())
    ids = torch.randint(4, SRC_VOCAB, (len(lengths), width), generator=generator)
    depth = torch.randint(0, 5, (len(lengths), width), generator=generator)
    valid = torch.arange(width)[None] < lengths[:, None]
    return Source(ids=ids.masked_fill(~valid, 0), lengths=lengths, depth=depth.masked_fill(~valid, 0))


def random_target(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    tgt = torch.randint(4, TGT_VOCAB, (batch, length), generator=generator)
    tgt[:, 0] = 2  # BOS
    return tgt


def select(src: Source, b: int) -> Source:
    n = int(src.lengths[b])
    return Source(ids=src.ids[b:b + 1, :n], lengths=src.lengths[b:b + 1], depth=src.depth[b:b + 1, :n])
