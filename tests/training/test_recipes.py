"""Each paper's configuration as a named recipe (platform/training/recipes.py), used by train, the spaces
and the study alike."""

import pytest
from helpers import run_in_process

from models import MODELS, build_model
from platform.errors import ConfigError
from platform.training import recipes
from platform.training.config import resolve_config


@pytest.mark.parametrize("name", sorted(recipes.RECIPES))
@pytest.mark.parametrize("size", ["smoke", "sweep", "cpu", "paper"])
def test_every_recipe_resolves_and_builds_at_every_size(name, size):
    recipe = recipes.RECIPES[name]
    config = resolve_config(recipe.model, size, recipe=name)
    for key, value in recipe.settings.items():
        if key in recipes.LAYER_KEYS and isinstance(value, str):
            layers = getattr(config.model, recipes.LAYER_KEYS[key])
            assert getattr(config.model, key) == {2: 1, 3: 2, 6: 4}[layers]  # 4/6 of smoke/sweep, cpu, paper
        else:
            assert getattr(config.model, key) == value, key
    if size == "paper":
        for key, value in recipe.paper_size.items():
            assert getattr(config.model, key) == value
    if size != "paper":  # the paper sizes are large; building the small ones checks every knob fits
        assert sum(p.numel() for p in build_model(config.model, 50, 50).parameters()) > 0


def test_every_model_has_a_default_recipe_of_its_own():
    assert set(recipes.DEFAULT_RECIPE) == set(MODELS)
    for model, name in recipes.DEFAULT_RECIPE.items():
        assert recipes.RECIPES[name].model == model


def test_paper_settings_of_the_recipes():
    omote = resolve_config("deprel", "paper", recipe="omote2019/dep+rel").model
    assert (omote.k_clip, omote.l_clip, omote.use_rel) == (2, 2, True)
    assert resolve_config("transformer_rel", "cpu").model.k_clip == 2  # default recipe omote2019/rel
    yang = resolve_config("tree2seq", "paper", recipe="yang2017/tree2seq").model
    assert (yang.rnn_cell, yang.tree_cell, yang.attention, yang.bidirectional) == ("gru", "gru", "bahdanau", False)
    assert (yang.d_embed, yang.d_hidden) == (620, 1000)  # forward leaves only: 1,000
    currey = resolve_config("gumbel_tree", "cpu", recipe="currey2018/top-down").model
    assert (currey.num_layers, currey.rnn_cell, currey.top_down, currey.gumbel_tau) == (2, "lstm", True, 0.5)
    assert (currey.leaf_layers, currey.dropout) == (1, 0.3)  # at every size
    dbsa = resolve_config("dbsa", "paper", recipe="deguchi2019/dec").model
    assert (dbsa.p_enc, dbsa.p_dec, dbsa.dec_parse_target) == (None, 4, "output")


def test_layer_fractions_scale_to_the_nearest_layer():
    assert [recipes.scale_layer("4/6", n) for n in (1, 2, 3, 4, 6, 12)] == [1, 1, 2, 3, 4, 8]
    assert recipes.scale_layer("1/6", 3) == 1 and recipes.scale_layer("6/6", 3) == 3
    assert recipes.scale_layer("1/2", 3) == 2 and recipes.scale_layer("1/4", 2) == 1  # halves round up
    assert recipes.scale_layer(3, 6) == 3
    with pytest.raises(ConfigError, match="fraction"):
        recipes.scale_layer("4/x", 6)


def test_a_recipe_of_another_model_is_refused():
    with pytest.raises(ConfigError, match="deprel recipe, not dbsa"):
        resolve_config("dbsa", "cpu", recipe="omote2019/dep")


def test_train_cli_runs_a_recipe_without_a_model_flag(capsys):
    from platform import train  # as its __main__ runs it, in this process (as a process: tests/test_train.py)

    printed = run_in_process(train.main, ["--recipe", "deguchi2019/enc", "--print-config"], capsys)
    assert printed.returncode == 0, printed.stderr
    # the paper's layer 4 of 6, scaled to the cpu preset's 2 layers
    assert "name: dbsa" in printed.stdout and "p_dec: null" in printed.stdout and "p_enc: 1" in printed.stdout
    refused = run_in_process(train.main, ["--print-config"], capsys)
    assert refused.returncode != 0 and "--model NAME or --recipe NAME" in refused.stderr


@pytest.mark.parametrize("name", sorted(recipes.RECIPES))
def test_every_recipe_value_carries_the_papers_words_or_not_stated(name):
    recipe = recipes.RECIPES[name]
    keys = recipe.keys()
    assert keys and set(keys) == set(recipe.quotes), set(keys) ^ set(recipe.quotes)
    for key in keys:
        quote = recipe.quotes[key]
        assert quote.startswith(("\"", recipes.NOT_STATED)) or "\"" in quote or quote == recipe.source, (key, quote)


def test_a_recipe_is_its_papers_training_and_decoding_as_printed(capsys):
    """What ``platform.train --print-config`` prints, from its ``main`` in this process (the CLI as
    a process of its own: test_train_cli_runs_a_recipe_without_a_model_flag)."""
    from platform import config_io, train

    def _printed(*args: str) -> str:
        capsys.readouterr()
        assert train.main([*args, "--print-config"]) == 0
        return capsys.readouterr().out

    yang = config_io.yaml_load(_printed("--recipe", "yang2017/gated", "--size", "paper"))
    assert yang["optim"]["optimizer"] == "adadelta" and yang["optim"]["schedule"] == "constant"
    assert yang["batching"]["max_sentences"] == 16 and yang["batching"]["max_tokens"] is None
    assert yang["decode"]["beam"] == 5 and yang["model"]["d_hidden"] == 500  # per direction
    currey = config_io.yaml_load(_printed("--recipe", "currey2018/bottom-up", "--size", "paper"))
    optim = currey["optim"]
    assert (optim["optimizer"], optim["lr"], optim["schedule"]) == ("adam", 1e-3, "constant")
    assert (currey["model"]["d_embed"], 2 * currey["model"]["d_hidden"]) == (500, 1000)  # embedding 500, hidden 1,000
    model = currey["model"]
    assert (currey["batching"]["max_sentences"], model["dropout"], model["leaf_layers"]) == (64, 0.3, 1)
    assert (currey["decode"]["beam"], currey["decode"]["max_len_a"], currey["decode"]["max_len_b"]) == (12, 0.0, 100)
    for size in (["--smoke"], ["--size", "cpu"], ["--size", "paper"]):  # greedy at every size
        assert config_io.yaml_load(_printed("--recipe", "omote2019/dep+rel", *size))["decode"]["beam"] == 1
    deguchi = config_io.yaml_load(_printed("--recipe", "deguchi2019/enc+dec", "--size", "paper"))
    assert (deguchi["max_epochs"], deguchi["batching"]["max_sentences"]) == (20, 224)
    assert deguchi["optim"]["clip_norm"] == 0.0
    assert (deguchi["decode"]["beam"], deguchi["decode"]["alpha"]) == (4, 0.6)
    # what only makes sense at paper size stays there; the rest holds at every size
    small = config_io.yaml_load(_printed("--recipe", "yang2017/gated", "--size", "cpu"))
    assert small["batching"]["max_sentences"] is None and small["optim"]["optimizer"] == "adadelta"
    overridden = config_io.yaml_load(_printed("--recipe", "yang2017/gated", "--set", "decode.beam=2"))
    assert overridden["decode"]["beam"] == 2


def test_yangs_table_rows_beta_one_and_bidirectional_leaves_only_are_recipes():
    beta1 = resolve_config("hier_tree_gru", "cpu", recipe="yang2017/beta1").model
    assert beta1.gate == "fixed1"
    bileaf = resolve_config("tree2seq", "paper", recipe="yang2017/bileaf").model
    assert bileaf.bidirectional and bileaf.d_hidden == 500
