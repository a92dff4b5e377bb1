"""The explicit model table and the one constructor (no registries, no import-time discovery)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from models.transformer import Transformer, TransformerConfig


@dataclass(frozen=True)
class ModelSpec:
    config_class: type
    model_class: type[nn.Module]
    preset: dict[str, Any] = field(default_factory=dict)  # defaults that make the name's model
    paper: str = ""


MODELS: dict[str, ModelSpec] = {
    "transformer": ModelSpec(TransformerConfig, Transformer, {"name": "transformer"}, "Vaswani et al. 2017"),
    "transformer_rel": ModelSpec(TransformerConfig, Transformer, {"name": "transformer_rel", "use_rel": True},
                                 "Shaw et al. 2018"),
    "dbsa": ModelSpec(TransformerConfig, Transformer, {"name": "dbsa", "p_enc": 4, "p_dec": 4}, "Deguchi et al. 2019"),
    "deprel": ModelSpec(TransformerConfig, Transformer, {"name": "deprel", "use_dep": True}, "Omote et al. 2019"),
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
    return spec.model_class(config, src_vocab, tgt_vocab)


def _spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(MODELS)}")
    return MODELS[name]
