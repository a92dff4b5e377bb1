"""Each paper's own configuration as one named recipe (``--recipe deguchi2019/enc+dec``).

A recipe is the model section a paper's table row used: the architecture and its knobs
(parse layers and λ, clip distances, cells, attention, gate, layers), plus the dimensions the
paper trained at, applied only with ``--size paper`` (smaller sizes keep the CPU/sweep/smoke
dimensions, so a recipe is comparable across sizes).  ``platform.train`` (``--recipe``, or
the model's default recipe), the search spaces' first points (``recipe:`` in a first point)
and ``benchmarks/study.py`` all read this one table.

A layer index may be written as a fraction of the layer count, ``"4/6"`` (the paper's layer 4
of 6): ``scale_layer`` maps it to the nearest layer of the model actually built (halves round
up; 4/6 of 2 layers is layer 1, of 3 layers 2, of 12 layers 8), the same rule for a recipe, a
YAML config and a space's first point.  Nearest rather than rounding up because it is what
the Quickstart measured best: on the demo corpus a parse head in the *top* layer of a 2-layer
model costs the most translation quality (docs/results.md).

What each recipe rests on is in its ``source`` (the paper, and for DBSA the authors' release
``de9uch1/dbsa``); settings not yet checked against the paper's text are named in ``unverified``
(docs/models.md lists them with every deviation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from platform.errors import ConfigError

LAYER_KEYS = {"p_enc": "num_encoder_layers", "p_dec": "num_decoder_layers"}
TRANSFORMER_PAPER = {}  # TransformerConfig's defaults are Vaswani et al.'s base model (6+6, 512, 8, 2048)
# Yang et al. 2017 (RNNsearch sizes).  Deviation: our decoder's dimension is the memory's, so
# with bidirectional leaves it is 2 × 1000 where RNNsearch's decoder has 1000 units.
YANG_PAPER = dict(d_embed=620, d_hidden=1000)


@dataclass(frozen=True)
class Recipe:
    model: str
    settings: dict[str, Any]  # model fields of the row (size-independent)
    source: str  # paper, table, row
    paper_size: dict[str, Any] = field(default_factory=dict)  # model dims under --size paper
    unverified: str = ""  # what could not be checked against the paper


_DEGUCHI = "Deguchi et al. 2019, Table 2"
_OMOTE = "Omote et al. 2019, Table 2"
_YANG = "Yang et al. 2017, Tables 3-4"
_CURREY = "Currey & Heafield 2018, Table 2"
_DBSA = dict(lambda_enc=1.0, lambda_dec=1.0, dec_parse_target="output")
_YANG_RNN = dict(rnn_cell="gru", attention="bahdanau", tree_cell="gru", num_layers=1)
_CURREY_RNN = dict(rnn_cell="lstm", num_layers=2, gumbel_tau=0.5)
_CURREY_UNVERIFIED = "embedding/hidden sizes and attention type (the paper's text was not available here)"

RECIPES: dict[str, Recipe] = {
    # Deguchi et al. 2019: parse heads in layer 4 of 6; λ = 1 (the release's first version;
    # it later defaults to 0.5); the decoder head supervised at the predicting position, as
    # the release does (models/dbsa.py)
    "deguchi2019/baseline": Recipe("transformer", {}, f"{_DEGUCHI}: Transformer baseline", TRANSFORMER_PAPER),
    "deguchi2019/enc": Recipe("dbsa", {**_DBSA, "p_enc": "4/6", "p_dec": None}, f"{_DEGUCHI}: DBSA encoder side",
                              TRANSFORMER_PAPER),
    "deguchi2019/dec": Recipe("dbsa", {**_DBSA, "p_enc": None, "p_dec": "4/6"}, f"{_DEGUCHI}: DBSA decoder side",
                              TRANSFORMER_PAPER),
    "deguchi2019/enc+dec": Recipe("dbsa", {**_DBSA, "p_enc": "4/6", "p_dec": "4/6"},
                                  f"{_DEGUCHI}: DBSA on both sides", TRANSFORMER_PAPER),
    # Omote et al. 2019: Shaw's clip k = 2 and the depth clip l = 2, keys and values
    "omote2019/baseline": Recipe("transformer", {}, f"{_OMOTE}: Transformer baseline", TRANSFORMER_PAPER),
    "omote2019/rel": Recipe("transformer_rel", {"use_rel": True, "k_clip": 2}, f"{_OMOTE}: rel (Shaw et al., k = 2)",
                            TRANSFORMER_PAPER),
    "omote2019/dep": Recipe("deprel", {"use_dep": True, "l_clip": 2, "use_rel": False},
                            f"{_OMOTE}: dep (relative depths, l = 2)", TRANSFORMER_PAPER),
    "omote2019/dep+rel": Recipe("deprel", {"use_dep": True, "l_clip": 2, "use_rel": True, "k_clip": 2},
                                f"{_OMOTE}: dep+rel (k = 2, l = 2)", TRANSFORMER_PAPER),
    # Yang et al. 2017: GRUs everywhere, additive attention, 620/1000; the tree-based baseline
    # reads the leaves forward only
    "yang2017/seq2seq": Recipe("seq2seq", dict(_YANG_RNN), f"{_YANG}: sequential baseline (RNNsearch)", YANG_PAPER),
    "yang2017/tree2seq": Recipe("tree2seq", {**_YANG_RNN, "bidirectional": False},
                                f"{_YANG}: tree-based baseline (Eriguchi et al., forward leaves)", YANG_PAPER),
    "yang2017/beta0": Recipe("hier_tree_gru", {**_YANG_RNN, "gate": "fixed0", "top_down": True},
                             f"{_YANG}: bidirectional tree encoder, β = 0", YANG_PAPER),
    "yang2017/beta05": Recipe("hier_tree_gru", {**_YANG_RNN, "gate": "fixed05", "top_down": True},
                              f"{_YANG}: bidirectional tree encoder, β = 0.5 (the original tree attention / 2)",
                              YANG_PAPER),
    "yang2017/gated": Recipe("hier_tree_gru", {**_YANG_RNN, "gate": "learned", "top_down": True},
                             f"{_YANG}: bidirectional tree encoder, gating scalar β_t", YANG_PAPER),
    # Currey & Heafield 2018: 2-layer LSTM encoder and decoder, Gumbel τ = 0.5
    "currey2018/seq2seq": Recipe("seq2seq", dict(_CURREY_RNN), f"{_CURREY}: sequential baseline",
                                 unverified=_CURREY_UNVERIFIED),
    "currey2018/bottom-up": Recipe("gumbel_tree", {**_CURREY_RNN, "top_down": False},
                                   f"{_CURREY}: unsupervised tree encoder (bottom-up)", unverified=_CURREY_UNVERIFIED),
    "currey2018/top-down": Recipe("gumbel_tree", {**_CURREY_RNN, "top_down": True},
                                  f"{_CURREY}: unsupervised tree encoder with the top-down pass",
                                  unverified=_CURREY_UNVERIFIED),
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
        default = " (default for --model %s)" % recipe.model if DEFAULT_RECIPE.get(recipe.model) == name else ""
        lines.append(f"{name:22s} {recipe.model:15s} {recipe.source}{default}")
    return "\n".join(lines)
