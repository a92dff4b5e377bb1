"""The resolved training config is strict."""

import pytest

from platform.errors import ConfigError
from platform.training.config import resolve_config


def test_resolved_train_config_is_strict(tmp_path):
    config = resolve_config("dbsa", "cpu", overrides=["model.p_enc=1", "optim.lr=5e-4"])
    assert config.model.p_enc == 1 and config.optim.lr == 5e-4 and config.model.d_model == 128
    with pytest.raises(ConfigError, match=r"unknown config key 'optim.learning_rate'; valid keys: .*lr"):
        resolve_config("dbsa", "cpu", overrides=["optim.learning_rate=1"])
    with pytest.raises(ConfigError, match="p_enc=9 is outside layers 1..2"):
        resolve_config("dbsa", "cpu", overrides=["model.p_enc=9"])
    with pytest.raises(ConfigError, match="model.gate: expected one of"):
        resolve_config("hier_tree_gru", "cpu", overrides=["model.gate=sometimes"])
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_model: 64\nmax_epochs: 3\n")
    config = resolve_config("transformer", "cpu", config_file=str(path))
    assert config.model.d_model == 64 and config.max_epochs == 3
