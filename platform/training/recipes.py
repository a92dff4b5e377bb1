"""Each paper's own setup as one named recipe (``--recipe deguchi2019/enc+dec``): its model,
training and decoding, every value with the words of the paper it comes from.

A recipe has four parts:

- ``settings``: model fields at every size (the architecture and its knobs: parse layers and λ,
  clip distances, cells, attention, gate, layer counts, dropout);
- ``training``: the rest of the config at every size (the optimiser family and its schedule,
  label smoothing, clipping, the decoding: greedy or beam, beam size, length penalty, maximum
  length), as dotted keys;
- ``paper_size`` and ``paper_training``: what only makes sense at the paper's scale (dimensions,
  batches, epochs, peak learning rate and warm-up, the training-length limit), applied with
  ``--size paper``; smaller sizes keep the CPU/sweep/smoke presets, so a recipe stays
  comparable across sizes.

``quotes`` gives, for every one of those values (``model.FIELD`` or the dotted key), the paper's
words, or ``not stated: …`` with the value chosen and why.  A flag or ``--set`` still overrides
anything.  ``platform.train`` (``--recipe``, or the model's default recipe), the search spaces
(their base config and ``recipe:`` first points) and ``benchmarks/study.py`` all read this one
table; docs/models.md lists it per paper with every deviation.

A layer index may be written as a fraction of the layer count, ``"4/6"`` (the paper's layer 4
of 6): ``scale_layer`` maps it to the nearest layer of the model actually built (halves round
up; 4/6 of 2 layers is layer 1, of 3 layers 2, of 12 layers 8), the same rule for a recipe, a
YAML config and a space's first point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from platform.errors import ConfigError

LAYER_KEYS = {"p_enc": "num_encoder_layers", "p_dec": "num_decoder_layers"}
NOT_STATED = "not stated"


@dataclass(frozen=True)
class Recipe:
    model: str
    settings: dict[str, Any]  # model fields, every size
    source: str  # paper, table, row
    training: dict[str, Any] = field(default_factory=dict)  # dotted config keys, every size
    paper_size: dict[str, Any] = field(default_factory=dict)  # model fields under --size paper
    paper_training: dict[str, Any] = field(default_factory=dict)  # dotted config keys under --size paper
    quotes: dict[str, str] = field(default_factory=dict)  # "model.FIELD" or dotted key → the paper's words

    def keys(self) -> list[str]:
        """Every config key the recipe sets (model fields as ``model.FIELD``)."""
        return ([f"model.{key}" for key in {**self.settings, **self.paper_size}]
                + list(self.training) + list(self.paper_training))


def _recipe(model: str, source: str, parts: list[dict[str, dict[str, Any]]], **settings: Any) -> Recipe:
    """A recipe from quoted parts: each part maps a section (``settings``, ``training``,
    ``paper_size``, ``paper_training``) to ``{key: (value, quote)}``; ``settings`` given as
    keywords are row-specific model fields quoted in ``source``."""
    merged: dict[str, dict[str, Any]] = {"settings": {}, "training": {}, "paper_size": {}, "paper_training": {}}
    quotes: dict[str, str] = {}
    for part in parts:
        for section, values in part.items():
            for key, (value, quote) in values.items():
                merged[section][key] = value
                quotes[f"model.{key}" if section in ("settings", "paper_size") else key] = quote
    for key, value in settings.items():
        merged["settings"][key] = value
        quotes[f"model.{key}"] = source
    return Recipe(model, merged["settings"], source, merged["training"], merged["paper_size"],
                  merged["paper_training"], quotes)


# ----------------------------------------------------------------------------- Deguchi et al. 2019

_DEGUCHI = "Deguchi et al. 2019, Table 2"
_VASWANI = "Hyper-parameters … following the settings of Vaswani et al. (2017)"
TRANSFORMER_PAPER = {  # the base Transformer both RANLP papers train
    "paper_size": {
        "num_encoder_layers": (6, "\"We stacked six layers for each encoder and decoder\" (Deguchi §4.1); "
                                  "\"the number of stacks of the encoder and decoder layers to 6\" (Omote §5.1)"),
        "num_decoder_layers": (6, "\"We stacked six layers for each encoder and decoder\" (Deguchi §4.1); "
                                  "\"the number of stacks of the encoder and decoder layers to 6\" (Omote §5.1)"),
        "d_model": (512, "\"n_head = 8 and d = 512\" (Deguchi §4.1); \"the embedding dimension to 512\" (Omote §5.1)"),
        "num_heads": (8, "\"n_head = 8\" (Deguchi §4.1); \"the number of heads to 8\" (Omote §5.1)"),
        "d_ff": (2048, f"{NOT_STATED}: 2048, Vaswani et al.'s base model, whose settings both papers follow"),
        "dropout": (0.1, f"{NOT_STATED}: 0.1, Vaswani et al.'s base model"),
    },
    "paper_training": {
        "optim.lr": (7e-4, "\"the learning rate and hyperparameter settings are set following Vaswani et al. "
                           "(2017)\" (Deguchi §4.2): d^-0.5 · warmup^-0.5 = 7.0e-4 at the end of warm-up"),
        "optim.warmup_steps": (4000, "\"with 4,000 warm-up steps\" (Omote §5.1); Vaswani et al.'s, "
                                     "which Deguchi follows"),
    },
}
_ADAM_VASWANI = {"training": {
    "optim.optimizer": ("adam", "\"We trained each model using Adam\" (Deguchi §4.2); "
                                "\"We used the Adam optimizer\" (Omote §5.1)"),
    "optim.schedule": ("inverse_sqrt", "\"the same warm-up and decay strategy for the learning rate as Vaswani et al. "
                                       "(2017)\" (Omote §5.1); \"set following Vaswani et al.\" (Deguchi §4.2)"),
    "optim.betas": ((0.9, 0.98), "\"β1 = 0.9, β2 = 0.98\" (Omote §5.1); Vaswani et al.'s (Deguchi)"),
    "optim.eps": (1e-9, "\"ε = 10^-9\" (Omote §5.1); Vaswani et al.'s (Deguchi)"),
    "optim.clip_norm": (0.0, f"{NOT_STATED}: no gradient clipping (neither paper nor Vaswani et al. clip)"),
}}
_DEGUCHI_TRAINING = {
    "training": {
        "optim.label_smoothing": (0.1, "\"we set ϵ_ls … in label smoothing to 0.1\" (§4.2)"),
        "decode.beam": (4, "\"using beam search with a beam size of 4 and length penalty α = 0.6\" (§4.2)"),
        "decode.alpha": (0.6, "\"length penalty α = 0.6 (Wu et al., 2016)\" (§4.2)"),
    },
    "paper_training": {
        "batching.max_sentences": (224, "\"We set the mini-batch size to 224\" "
                                        "(§4.2; read as sentences, the unit is not stated)"),
        "batching.max_tokens": (None, f"{NOT_STATED} in tokens: the batch is counted in sentences (§4.2), "
                                      "so no token cap"),
        "max_epochs": (20, "\"the number of epochs to 20\" (§4.2)"),
        "batching.max_length": (250, "\"long sentences with over 250 subword-tokens were filtered out\" (§4.1)"),
    },
    "settings": {
        "lambda_enc": (1.0, "\"both the hyperparameters λ_enc and λ_dec to 1.0\" (§4.2)"),
        "lambda_dec": (1.0, "\"both the hyperparameters λ_enc and λ_dec to 1.0\" (§4.2)"),
        "dec_parse_target": ("output", f"{NOT_STATED}: the position that predicts y_i, as the authors' release "
                                       "(de9uch1/dbsa; models/dbsa.py)"),
    },
}
_LAYER_4 = "\"into the fourth layer in both the encoder and the decoder (i.e., p_e = p_d = 4)\" (§4.1)"
_ENC_LAYER = {"settings": {"p_enc": ("4/6", _LAYER_4)}}  # layer 4 of 6, scaled to the model built
_DEC_LAYER = {"settings": {"p_dec": ("4/6", _LAYER_4)}}
_DEGUCHI_PARTS = [TRANSFORMER_PAPER, _ADAM_VASWANI, _DEGUCHI_TRAINING]

# ----------------------------------------------------------------------------- Omote et al. 2019

_OMOTE = "Omote et al. 2019, Table 2"
_OMOTE_TRAINING = {
    "training": {
        "optim.label_smoothing": (0.1, f"{NOT_STATED}: 0.1, Vaswani et al.'s (\"{_VASWANI}\", §5.1)"),
        "decode.beam": (1, "\"target sentences were generated by a greedy algorithm\" (§5.1)"),
        "decode.alpha": (0.0, "\"target sentences were generated by a greedy algorithm\" (§5.1): no length penalty"),
    },
    "paper_training": {
        "batching.max_sentences": (256, "\"The batch size was 256\" (§5.1; read as sentences, the unit is not stated)"),
        "batching.max_tokens": (None, f"{NOT_STATED} in tokens: the batch is counted in sentences (§5.1), "
                                      "so no token cap"),
        "max_epochs": (30, "\"the number of epochs was 30\" (§5.1)"),
        "batching.max_length": (50, "\"sentence pairs of 50 words or less\" (§5.1); ours counts subwords, so it "
                                    "keeps somewhat fewer pairs"),
    },
}
_OMOTE_PARTS = [TRANSFORMER_PAPER, _ADAM_VASWANI, _OMOTE_TRAINING]
_CLIPS = {"settings": {
    "k_clip": (2, "\"set as k = 2, l = 2 for Transformer_rel, Transformer_dep, and Transformer_dep+rel\" (§5.1)"),
}}
_DEPTH_CLIP = {"settings": {
    "l_clip": (2, "\"set as k = 2, l = 2 …\" (§5.1); \"l was tuned on development data\" (footnote 3)"),
}}

# ----------------------------------------------------------------------------- Yang et al. 2017

_YANG = "Yang et al. 2017, Tables 3-4"
_YANG_DIMS = "\"The dimensions of word embedding and hidden layer are respectively set as 620 and 1,000\" (§4.2)"
_YANG_PARTS = [{
    "settings": {
        "rnn_cell": ("gru", "\"we utilize the gated recurrent unit (GRU) … instead of an LSTM\" (§2.1)"),
        "tree_cell": ("gru", "\"we utilize the gated recurrent unit (GRU)\" (§2.1) for the tree too; "
                             "its equations are missing from the text (models/tree.py)"),
        "attention": ("bahdanau", "\"attention mechanism Bahdanau et al. (2015)\" with input feeding (§2.2)"),
        "num_layers": (1, f"{NOT_STATED}: one layer, as dl4mt (\"based on dl4mt\", §4.2) and the equations"),
    },
    "training": {
        "optim.optimizer": ("adadelta", "\"the model parameters are optimized using AdaDelta Zeiler (2012)\" (§4.2)"),
        "optim.schedule": ("constant", "AdaDelta adapts the rate itself: \"due to its capability for dynamically "
                                       "adapting the learning rate\" (§4.2)"),
        "optim.lr": (1.0, f"{NOT_STATED}: 1.0, AdaDelta's own scale (Zeiler 2012; dl4mt)"),
        "optim.warmup_steps": (0, f"{NOT_STATED}: no warm-up (AdaDelta adapts the rate itself, §4.2)"),
        "optim.rho": (0.95, f"{NOT_STATED}: ρ = 0.95, Zeiler 2012 and dl4mt"),
        "optim.eps": (1e-6, f"{NOT_STATED}: ε = 1e-6, Zeiler 2012 and dl4mt"),
        "optim.label_smoothing": (0.0, f"{NOT_STATED}: none (dl4mt, the authors' code base, has none)"),
        "optim.clip_norm": (0.0, f"{NOT_STATED}: no gradient clipping"),
        "decode.beam": (5, "\"the beam search size to 5\" (§4.2)"),
        "decode.alpha": (0.0, f"{NOT_STATED}: no length penalty"),
    },
    "paper_size": {"d_embed": (620, _YANG_DIMS)},
    "paper_training": {
        "batching.max_sentences": (16, "\"We set the mini-batch size to 16\" (§4.2)"),
        "batching.max_tokens": (None, f"{NOT_STATED} in tokens: the batch is counted in sentences (§4.2), "
                                      "so no token cap"),
        "batching.max_length": (40, "\"the maximum length of the sentence was 40\" (§4.1); ours counts subwords"),
    },
}]
_BIDIRECTIONAL_500 = {"paper_size": {"d_hidden": (500, "\"the dimensions of the forward and backward vectors, which "
                                                       "are half of those of the other hidden states, are set to "
                                                       "500\" (§4.2): memory and decoder 1,000")}}
_FORWARD_1000 = {"paper_size": {"d_hidden": (1000, f"{_YANG_DIMS}: forward leaves only, "
                                                   "so the memory and decoder are 1,000")}}

# ----------------------------------------------------------------------------- Currey & Heafield 2018

_CURREY = "Currey & Heafield 2018, Table 2"
_CURREY_SIZES = "\"They use word embedding size 500, hidden layer size 1000, batch size 64, two layers in the " \
                "encoder and decoder, and dropout rate 0.3\" (§4.3)"
_CURREY_PARTS = [{
    "settings": {
        "rnn_cell": ("lstm", "\"we run a single-layer bidirectional LSTM over the source sentence\" (§3.1)"),
        "num_layers": (2, _CURREY_SIZES),
        "dropout": (0.3, f"{_CURREY_SIZES}; theirs is variational (Gal and Ghahramani), ours standard dropout"),
        "gumbel_tau": (0.5, "\"a Gumbel temperature of … 0.5, which performed best in preliminary "
                            "experiments\" (§4.3)"),
        "attention": ("luong", f"{NOT_STATED}: Luong's general attention, OpenNMT-py's default (\"All models are "
                               "implemented in OpenNMT-py\", §4.3)"),
    },
    "training": {
        "optim.optimizer": ("adam", "\"Models are trained using Adam … with learning rate 0.001\" (§4.3)"),
        "optim.schedule": ("constant", f"{NOT_STATED}: no schedule is given for the learning rate 0.001 (§4.3)"),
        "optim.lr": (1e-3, "\"with learning rate 0.001\" (§4.3)"),
        "optim.warmup_steps": (0, f"{NOT_STATED}: no warm-up"),
        "optim.betas": ((0.9, 0.999), f"{NOT_STATED}: Adam's own defaults (Kingma and Ba; OpenNMT-py)"),
        "optim.eps": (1e-8, f"{NOT_STATED}: Adam's own default"),
        "optim.label_smoothing": (0.0, f"{NOT_STATED}: none, OpenNMT-py's default"),
        "optim.clip_norm": (0.0, f"{NOT_STATED}: no gradient clipping"),
        "decode.beam": (12, "\"During inference, we set beam size to 12 and maximum length to 100\" (§4.3)"),
        "decode.alpha": (0.0, f"{NOT_STATED}: no length penalty"),
        "decode.max_len_a": (0.0, "\"maximum length to 100\" (§4.3): a fixed limit, not one relative to the source"),
        "decode.max_len_b": (100, "\"maximum length to 100\" (§4.3); ours counts subwords"),
    },
    "paper_size": {
        "d_embed": (500, _CURREY_SIZES),
        "d_hidden": (500, f"{_CURREY_SIZES}: 1,000 for both directions together (OpenNMT-py's brnn splits it), "
                          "so memory and decoder are 1,000"),
    },
    "paper_training": {
        "batching.max_sentences": (64, _CURREY_SIZES),
        "batching.max_tokens": (None, f"{NOT_STATED} in tokens: the batch is counted in sentences (§4.3), "
                                      "so no token cap"),
        "batching.max_length": (50, "\"We set maximum sentence length to 50\" (§4.3); ours counts subwords"),
        "max_epochs": (30, f"{NOT_STATED}: \"We train until convergence on the validation set\" (§4.3): at most 30 "
                           "epochs, with patience"),
        "patience": (3, f"{NOT_STATED}: convergence read as 3 epochs without a better dev BLEU; \"the model with "
                        "the highest BLEU on the validation set is used\" (§4.3)"),
    },
}]
_SINGLE_LEAF_LAYER = {"settings": {
    "leaf_layers": (1, "\"we run a single-layer bidirectional LSTM over the source sentence\" (§3.1); \"The "
                       "tree-LSTM component … has only a single layer\" (§4.3)"),
}}

RECIPES: dict[str, Recipe] = {
    "deguchi2019/baseline": _recipe("transformer", f"{_DEGUCHI}: Transformer baseline", _DEGUCHI_PARTS),
    "deguchi2019/enc": _recipe("dbsa", f"{_DEGUCHI}: DBSA encoder side", [*_DEGUCHI_PARTS, _ENC_LAYER], p_dec=None),
    "deguchi2019/dec": _recipe("dbsa", f"{_DEGUCHI}: DBSA decoder side", [*_DEGUCHI_PARTS, _DEC_LAYER], p_enc=None),
    "deguchi2019/enc+dec": _recipe("dbsa", f"{_DEGUCHI}: DBSA on both sides",
                                   [*_DEGUCHI_PARTS, _ENC_LAYER, _DEC_LAYER]),
    "omote2019/baseline": _recipe("transformer", f"{_OMOTE}: Transformer baseline", _OMOTE_PARTS),
    "omote2019/rel": _recipe("transformer_rel", f"{_OMOTE}: rel (Shaw et al., k = 2)", [*_OMOTE_PARTS, _CLIPS],
                             use_rel=True),
    "omote2019/dep": _recipe("deprel", f"{_OMOTE}: dep (relative depths, l = 2)", [*_OMOTE_PARTS, _DEPTH_CLIP],
                             use_dep=True, use_rel=False),
    "omote2019/dep+rel": _recipe("deprel", f"{_OMOTE}: dep+rel (k = 2, l = 2)", [*_OMOTE_PARTS, _CLIPS, _DEPTH_CLIP],
                                 use_dep=True, use_rel=True),
    "yang2017/seq2seq": _recipe("seq2seq", f"{_YANG}: sequential baseline (RNNsearch)",
                                [*_YANG_PARTS, _BIDIRECTIONAL_500]),
    "yang2017/tree2seq": _recipe("tree2seq", f"{_YANG}: Table 3 \"tree-based encoder\" (Eriguchi et al., forward "
                                 "leaves)", [*_YANG_PARTS, _FORWARD_1000], bidirectional=False),
    "yang2017/bileaf": _recipe("tree2seq", f"{_YANG}: Table 3 \"+ bidirectional leaf-node encoding\" (92.0M)",
                               [*_YANG_PARTS, _BIDIRECTIONAL_500], bidirectional=True),
    "yang2017/beta0": _recipe("hier_tree_gru", f"{_YANG}: Table 4, lexical context only (β = 0)",
                              [*_YANG_PARTS, _BIDIRECTIONAL_500], gate="fixed0", top_down=True),
    "yang2017/beta05": _recipe("hier_tree_gru", f"{_YANG}: Table 4, β = 0.5 (the original tree attention / 2)",
                               [*_YANG_PARTS, _BIDIRECTIONAL_500], gate="fixed05", top_down=True),
    "yang2017/beta1": _recipe("hier_tree_gru", f"{_YANG}: Table 4, phrase context only (β = 1: \"the model which "
                              "attends only to phrase representations\")", [*_YANG_PARTS, _BIDIRECTIONAL_500],
                              gate="fixed1", top_down=True),
    "yang2017/gated": _recipe("hier_tree_gru", f"{_YANG}: Table 3 \"+ gating scalar\" (105.1M)",
                              [*_YANG_PARTS, _BIDIRECTIONAL_500], gate="learned", top_down=True),
    "currey2018/seq2seq": _recipe("seq2seq", f"{_CURREY}: sequential baseline", _CURREY_PARTS),
    "currey2018/bottom-up": _recipe("gumbel_tree", f"{_CURREY}: unsupervised tree encoder (bottom-up)",
                                    [*_CURREY_PARTS, _SINGLE_LEAF_LAYER], top_down=False),
    "currey2018/top-down": _recipe("gumbel_tree", f"{_CURREY}: unsupervised tree encoder with the top-down pass",
                                   [*_CURREY_PARTS, _SINGLE_LEAF_LAYER], top_down=True),
}

# what ``--model NAME`` without ``--recipe`` runs: the row of the paper the model comes from
DEFAULT_RECIPE = {
    "transformer": "deguchi2019/baseline",
    "transformer_rel": "omote2019/rel",
    "dbsa": "deguchi2019/enc+dec",
    "deprel": "omote2019/dep",
    "seq2seq": "yang2017/seq2seq",
    "tree2seq": "yang2017/tree2seq",
    "hier_tree_gru": "yang2017/gated",
    "gumbel_tree": "currey2018/bottom-up",
}


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ConfigError(f"unknown recipe {name!r}; available: {', '.join(RECIPES)}")
    return RECIPES[name]


def recipe_for(model: str, recipe: str | None) -> tuple[str, Recipe]:
    """The recipe a run of ``model`` uses (its default when ``recipe`` is None), checked to fit."""
    name = recipe or DEFAULT_RECIPE[model]
    found = get_recipe(name)
    if found.model != model:
        raise ConfigError(f"recipe {name} is a {found.model} recipe, not {model}")
    return name, found


def scale_layer(value: Any, layers: int) -> Any:
    """``"4/6"`` → the layer nearest to 4/6 · ``layers`` (halves up) within ``1..layers``; else unchanged."""
    if not (isinstance(value, str) and "/" in value):
        return value
    try:
        share = Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise ConfigError(f"layer {value!r} is neither a layer number nor a fraction like 4/6") from None
    return min(max(math.floor(share * layers + Fraction(1, 2)), 1), layers)


def resolve_layers(model: dict[str, Any], defaults: dict[str, int]) -> dict[str, Any]:
    """The model section with fractional parse layers (``p_enc: 4/6``) scaled to its layer counts."""
    resolved = dict(model)
    for key, count_key in LAYER_KEYS.items():
        if key in resolved:
            resolved[key] = scale_layer(resolved[key], int(resolved.get(count_key, defaults.get(count_key, 0))))
    return resolved


def describe() -> str:
    """The recipe table for ``--help`` and docs/models.md."""
    lines = []
    for name, recipe in RECIPES.items():
        default = f" (default for --model {recipe.model})" if DEFAULT_RECIPE.get(recipe.model) == name else ""
        lines.append(f"{name:22s} {recipe.model:15s} {recipe.source}{default}")
    return "\n".join(lines)
