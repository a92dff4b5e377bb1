"""Eq. 18's loss weights are typed fields of the models that have parse heads: no default stands
in for a missing or misspelt one."""

import pytest

from platform.errors import ConfigError
from platform.training.config import knob_key, knob_name, resolve_config


def test_the_weights_are_those_of_the_parse_heads_the_model_has():
    dbsa = resolve_config("dbsa", "smoke", overrides=["model.lambda_enc=0.5", "model.lambda_dec=2.0"]).model
    assert dbsa.parse_supervision().lambda_enc == 0.5 and dbsa.parse_supervision().lambda_dec == 2.0
    encoder_only = resolve_config("dbsa", "smoke", overrides=["model.p_dec=null"]).model
    assert encoder_only.parse_supervision().lambda_dec == 0.0  # no decoder head: nothing to weigh
    baseline = resolve_config("transformer", "smoke").model
    assert (baseline.parse_supervision().lambda_enc, baseline.parse_supervision().lambda_dec) == (0.0, 0.0)
    gumbel = resolve_config("gumbel_tree", "smoke").model
    assert not hasattr(gumbel, "lambda_enc") and gumbel.parse_supervision().lambda_enc == 0.0


@pytest.mark.parametrize("key", ["model.lambda_enc", "model.lamda_enc"])
def test_a_weight_the_model_has_not_is_refused(key):
    with pytest.raises(ConfigError, match="unknown"):
        resolve_config("gumbel_tree", "smoke", overrides=[f"{key}=2.0"])
    if key == "model.lamda_enc":
        with pytest.raises(ConfigError, match="unknown"):
            resolve_config("dbsa", "smoke", overrides=[f"{key}=2.0"])


def test_one_knob_naming_rule_both_ways():
    assert knob_name("model.p_enc") == "p_enc" and knob_key("p_enc") == "model.p_enc"
    assert knob_name("optim.lr") == "optim.lr" and knob_key("optim.lr") == "optim.lr"
    assert knob_key("model.p_enc") == "model.p_enc" and knob_key("max_epochs") == "max_epochs"
