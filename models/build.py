"""The explicit model table and the one constructor (no registries, no import-time discovery)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from models.gumbel import GumbelTreeEncoder
from models.rnn import AttentionDecoder, RecurrentTranslator, RNNConfig, SequentialEncoder
from models.transformer import Transformer, TransformerConfig
from models.tree import HierTreeGRUEncoder, Tree2SeqEncoder


@dataclass(frozen=True)
class ModelSpec:
    """One row of the model table: everything the platform needs to know about a model.

    Adding a model is its ``models/`` file and one row here: the platform derives its config
    section, its size presets (per ``config_class``) and its inference inputs from this row."""

    config_class: type
    model_class: type[nn.Module]
    preset: dict[str, Any] = field(default_factory=dict)  # defaults that make the name's model
    paper: str = ""
    encoder_class: type[nn.Module] | None = None  # recurrent models: the encoder under the attention decoder
    gated_decoder: bool = False  # the decoder's word/phrase gate (Yang et al.), set by ``config.gate``
    source_syntax: str | None = None  # what translating needs from the source parse: "depth", "tree" or None


MODELS: dict[str, ModelSpec] = {
    "transformer": ModelSpec(TransformerConfig, Transformer, {"name": "transformer"}, "Vaswani et al. 2017"),
    "transformer_rel": ModelSpec(TransformerConfig, Transformer, {"name": "transformer_rel", "use_rel": True},
                                 "Shaw et al. 2018"),
    "dbsa": ModelSpec(TransformerConfig, Transformer, {"name": "dbsa", "p_enc": 4, "p_dec": 4}, "Deguchi et al. 2019"),
    "deprel": ModelSpec(TransformerConfig, Transformer, {"name": "deprel", "use_dep": True}, "Omote et al. 2019",
                        source_syntax="depth"),
    "seq2seq": ModelSpec(RNNConfig, RecurrentTranslator, {"name": "seq2seq"},
                         "Luong et al. 2015 / Bahdanau et al. 2015", encoder_class=SequentialEncoder),
    "tree2seq": ModelSpec(RNNConfig, RecurrentTranslator, {"name": "tree2seq", "tree_cell": "lstm"},
                          "Eriguchi et al. 2016", encoder_class=Tree2SeqEncoder, source_syntax="tree"),
    "hier_tree_gru": ModelSpec(RNNConfig, RecurrentTranslator,
                               {"name": "hier_tree_gru", "rnn_cell": "gru", "top_down": True, "gate": "learned"},
                               "Yang et al. 2017",
                               encoder_class=HierTreeGRUEncoder, gated_decoder=True, source_syntax="tree"),
    "gumbel_tree": ModelSpec(RNNConfig, RecurrentTranslator, {"name": "gumbel_tree", "top_down": False,
                                                               "gumbel_tau": 0.5}, "Currey & Heafield 2018",
                             encoder_class=GumbelTreeEncoder),
}


def default_config(name: str, **overrides: Any):
    """The config of model ``name``: its preset, then ``overrides`` (unknown keys raise ValueError)."""
    spec = _spec(name)
    known = {f.name for f in dataclasses.fields(spec.config_class)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown {name} config key(s) {unknown}; valid keys: {', '.join(sorted(known))}")
    return spec.config_class(**{**spec.preset, **overrides})


def build_model(config, src_vocab: int, tgt_vocab: int) -> nn.Module:
    """Validate ``config`` (ValueError with the reason) and build its model."""
    spec = _spec(config.name)
    if not isinstance(config, spec.config_class):
        raise ValueError(f"model {config.name!r} needs a {spec.config_class.__name__}, got {type(config).__name__}")
    if min(src_vocab, tgt_vocab) < 4:
        raise ValueError(f"vocabularies need at least the 4 special ids, got {src_vocab}/{tgt_vocab}")
    config.validate()
    if spec.encoder_class is not None:
        gate = config.gate if spec.gated_decoder else None
        encoder = spec.encoder_class(config, src_vocab)
        return spec.model_class(config, encoder, AttentionDecoder(config, tgt_vocab, gate=gate))
    return spec.model_class(config, src_vocab, tgt_vocab)


def _spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(MODELS)}")
    return MODELS[name]
