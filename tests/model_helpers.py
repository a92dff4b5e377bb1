"""Small seeded models and batches for the model tests (pure torch)."""

from __future__ import annotations

import torch
from helpers import smoke_dims

from models import build_model, default_config
from models.inputs import Source

TINY = smoke_dims("transformer", dropout=0.0)  # no dropout: outputs in train mode are deterministic too
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
    """Sentence b alone, unpadded (tree parents re-indexed to its own width)."""
    n = int(src.lengths[b])
    depth = src.depth[b:b + 1, :n] if src.depth is not None else None
    tree = None
    if src.tree_parent is not None:
        width = src.ids.shape[1]
        parent = src.tree_parent[b]
        own = torch.cat([parent[:n], parent[width:width + n - 1]])
        tree = torch.where(own >= width, own - width + n, own)[None]
    return Source(ids=src.ids[b:b + 1, :n], lengths=src.lengths[b:b + 1], depth=depth, tree_parent=tree)


def tree_source(lengths, seed: int = 0, vocab: int = SRC_VOCAB) -> Source:
    """Random dependency trees turned into the batch layout of ``Source.tree_parent``."""
    import random

    from platform.data.trees import binary_tree

    rng = random.Random(seed)
    width = max(lengths)
    parents = torch.full((len(lengths), 2 * width - 1), -1)
    for b, n in enumerate(lengths):
        heads = [-1] * n
        order = list(range(n))
        rng.shuffle(order)
        for position, word in enumerate(order[1:], start=1):
            heads[word] = order[rng.randrange(position)]
        parent = [p - n + width if p >= n else p for p in binary_tree(heads, list(range(n)))]
        parents[b, :n] = torch.tensor(parent[:n])
        parents[b, width:width + n - 1] = torch.tensor(parent[n:], dtype=torch.long)
    src = random_source(lengths, seed)
    return Source(ids=src.ids, lengths=src.lengths, depth=src.depth, tree_parent=parents)


RNN_TINY = dict(d_embed=16, d_hidden=12, dropout=0.0)


def tiny_rnn(name: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return build_model(default_config(name, **{**RNN_TINY, **overrides}), SRC_VOCAB, TGT_VOCAB).eval()
