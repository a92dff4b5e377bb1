"""The resolved training config is strict."""

import pytest

from platform.errors import ConfigError
from platform.training.config import resolve_config


def test_resolved_train_config_is_strict(tmp_path):
    config = resolve_config("dbsa", "cpu", overrides=["model.p_enc=1", "optim.lr=5e-4"])
    assert config.model.p_enc == 1 and config.optim.lr == 5e-4 and config.model.d_model == 128
    with pytest.raises(ConfigError, match=r"unknown config key 'optim.learning_rate'; valid keys: .*lr"):
        resolve_config("dbsa", "cpu", overrides=["optim.learning_rate=1"])
    with pytest.raises(ConfigError, match=r"^unknown config key 'model.p_encc'; did you mean 'model.p_enc'\?$"):
        resolve_config("dbsa", "cpu", overrides=["model.p_encc=3"])
    with pytest.raises(ConfigError, match=r"patience must be ≥ 1 validation \(or null: no early stopping\), got 0"):
        resolve_config("dbsa", "cpu", overrides=["patience=0"])
    with pytest.raises(ConfigError, match="p_enc=9 is outside layers 1..2"):
        resolve_config("dbsa", "cpu", overrides=["model.p_enc=9"])
    with pytest.raises(ConfigError, match="model.gate: expected one of"):
        resolve_config("hier_tree_gru", "cpu", overrides=["model.gate=sometimes"])
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_model: 64\nmax_epochs: 3\n")
    config = resolve_config("transformer", "cpu", config_file=str(path))
    assert config.model.d_model == 64 and config.max_epochs == 3


def test_a_config_written_before_a_key_was_renamed_still_loads(tmp_path):
    """A sweep's best_config.yaml (or a checkpoint's config) from before ``keep_last_epochs``
    became ``average_last`` loads under the new name, as a file and as ``--set``."""
    old = tmp_path / "best_config.yaml"
    old.write_text("keep_last_epochs: 3\n")
    assert resolve_config("dbsa", "cpu", config_file=str(old)).average_last == 3
    assert resolve_config("dbsa", "cpu", overrides=["keep_last_epochs=2"]).average_last == 2
    assert resolve_config("dbsa", "cpu", overrides=["keep_last=3"]).resume_checkpoints == 3  # Ray's, renamed


def test_share_all_embeddings_is_a_flag_of_the_transformer_family_and_lands_in_the_config():
    from platform.errors import UserError
    from platform.launch.training_run import TrainRequest, resolved

    _, _, config = resolved(TrainRequest(model="dbsa", share_all_embeddings=True, smoke=True))
    assert config.model.share_all_embeddings and config.model.tie_target_embeddings  # saved with the run's config
    assert not resolved(TrainRequest(model="dbsa", smoke=True))[2].model.share_all_embeddings
    with pytest.raises(UserError) as refused:
        resolved(TrainRequest(model="seq2seq", share_all_embeddings=True))
    assert str(refused.value) == ("--share-all-embeddings: model seq2seq embeds each language on its own; "
                                  "the models that can share: transformer, transformer_rel, dbsa, deprel")


def test_a_commands_typed_flags_reach_the_config_as_they_are_after_set_and_are_validated_there():
    from platform.errors import ConfigError
    from platform.launch.training_run import TrainRequest, resolved

    _, _, config = resolved(TrainRequest(model="dbsa", smoke=True, average_last=2, log_every=7, keep_best=1,
                                         overrides=["average_last=9", "optim.lr=0.001"]))
    assert (config.average_last, config.log_every, config.keep_best, config.optim.lr) == (2, 7, 1, 0.001)
    with pytest.raises(ConfigError, match="validate_every must be ≥ 1, got 0"):
        resolved(TrainRequest(model="dbsa", smoke=True, validate_every=0))
