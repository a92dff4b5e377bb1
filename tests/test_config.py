"""Strict typed configs: unknown keys and wrong types are errors; YAML round-trips."""

from dataclasses import dataclass, field
from typing import Literal

import pytest

from platform import config_io as cfg
from platform.data.encode import PrepareConfig
from platform.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Inner:
    d_model: int = 512
    dropout: float = 0.1
    heads: tuple[int, ...] = (8,)


@dataclass(frozen=True, kw_only=True)
class Outer:
    name: str
    model: Inner = field(default_factory=Inner)
    p_enc: int | None = None
    gate: Literal["fixed0", "fixed05", "fixed1", "learned"] = "learned"
    tied: bool = True


def test_unknown_key_with_no_close_one_is_an_error_listing_the_valid_keys():
    with pytest.raises(ConfigError) as error:
        cfg.from_dict(Outer, {"name": "x", "colour": "y"})
    assert str(error.value) == "unknown config key 'colour'; valid keys: gate, model, name, p_enc, tied"


def test_unknown_nested_key_names_its_path_and_the_closest_valid_key():
    with pytest.raises(ConfigError) as error:
        cfg.from_dict(Outer, {"name": "x", "model": {"d_modle": 3}})
    assert str(error.value) == "unknown config key 'model.d_modle'; did you mean 'model.d_model'?"
    with pytest.raises(ConfigError) as error:
        cfg.from_dict(Outer, {"name": "x", "p_encc": 3})
    assert str(error.value) == "unknown config key 'p_encc'; did you mean 'p_enc'?"


@pytest.mark.parametrize(
    "data, message",
    [
        ({"name": 3}, "name: expected str, got 3"),
        ({"name": "x", "tied": "yes"}, "tied: expected bool"),
        ({"name": "x", "model": {"d_model": 1.5}}, "model.d_model: expected int"),
        ({"name": "x", "model": {"d_model": True}}, "model.d_model: expected int"),
        ({"name": "x", "gate": "fixed2"}, "gate: expected one of 'fixed0'"),
        ({"name": "x", "p_enc": "3"}, "p_enc: expected int | null"),
        ({}, "missing required config key(s): name"),
    ],
)
def test_wrong_types_are_errors(data, message):
    with pytest.raises(ConfigError) as error:
        cfg.from_dict(Outer, data)
    assert message in str(error.value)


def test_int_is_accepted_for_float_and_none_for_optional():
    loaded = cfg.from_dict(Outer, {"name": "x", "model": {"dropout": 0}, "p_enc": None})
    assert loaded.model.dropout == 0.0 and isinstance(loaded.model.dropout, float)
    assert loaded.p_enc is None


def test_yaml_and_set_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: base\nmodel:\n  d_model: 256\n")
    loaded = cfg.load(Outer, path, ["model.dropout=0.3", "p_enc=2", "gate=fixed05", "model.heads=[4, 4]"])
    assert loaded == Outer(name="base", model=Inner(d_model=256, dropout=0.3, heads=(4, 4)), p_enc=2, gate="fixed05")


def test_bad_override_and_bad_yaml_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="--set expects key=value"):
        cfg.load(Outer, None, ["name"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+: invalid YAML"):
        cfg.load(Outer, bad)


def test_resolved_config_round_trips_through_yaml(tmp_path):
    original = cfg.load(PrepareConfig, None,
                        ["src_lang=ja", "tgt_lang=en", "subwords.vocab_size=1000", "subword_head=last"])
    path = tmp_path / "config.yaml"
    cfg.dump_yaml(original, path)
    assert cfg.load(PrepareConfig, path) == original
    assert cfg.flat_dict(original)["subwords.vocab_size"] == 1000


def config_classes() -> set[type]:
    """Every config dataclass a run or a dataset is made of: TrainConfig and its sections, each
    model's config, PrepareConfig and its sections."""
    import dataclasses
    import typing

    from models import MODELS
    from platform.training.config import TrainConfig

    found, todo = set(), [TrainConfig, PrepareConfig, *(spec.config_class for spec in MODELS.values())]
    while todo:
        cls = todo.pop()
        if cls in found:
            continue
        found.add(cls)
        for hint in typing.get_type_hints(cls).values():
            todo += [arg for arg in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(arg)]
    return found


def test_the_platforms_configs_are_frozen_and_keyword_only():
    import dataclasses

    from helpers import tiny_config

    classes = config_classes()
    assert len(classes) >= 9  # TrainConfig and its 4 sections, the 2 model configs, PrepareConfig and its subwords
    for cls in classes:
        assert cls.__dataclass_params__.frozen, f"{cls.__name__} is not frozen"
        assert all(f.kw_only for f in dataclasses.fields(cls)), f"{cls.__name__} takes positional arguments"
    config = tiny_config("dbsa")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.optim.lr = 1.0


def test_validation_in_post_init_becomes_a_config_error():
    with pytest.raises(ConfigError, match="max_len must be positive"):
        cfg.from_dict(PrepareConfig, {"src_lang": "ja", "tgt_lang": "en", "max_len": 0})


def test_scientific_notation_is_a_number_in_files_and_overrides(tmp_path):
    @dataclass(frozen=True, kw_only=True)
    class Optim:
        lr: float = 1.0

    assert cfg.load(Optim, None, ["lr=5e-4"]).lr == 5e-4
    path = tmp_path / "o.yaml"
    path.write_text("lr: 3e-5\n")
    assert cfg.load(Optim, path).lr == 3e-5


@pytest.mark.parametrize("model, packed", [("transformer", True), ("deprel", True), ("transformer_rel", True),
                                           ("dbsa", True), ("seq2seq", False), ("gumbel_tree", False)])
def test_batches_are_packed_wherever_the_model_can_train_on_packed_rows(model, packed):
    from platform.training.config import resolve_config

    assert resolve_config(model, "cpu").batching.pack is packed


def test_packing_a_model_that_cannot_is_one_clear_error():
    from platform.training.config import resolve_config

    with pytest.raises(ConfigError, match="batching.pack: model 'hier_tree_gru' cannot train on packed rows"):
        resolve_config("hier_tree_gru", "cpu", overrides=["batching.pack=true"])
    assert resolve_config("transformer", "cpu", overrides=["batching.pack=false"]).batching.pack is False
    with pytest.raises((ConfigError, ValueError), match="fixed_shape pads packed batches"):
        resolve_config("hier_tree_gru", "cpu", overrides=["batching.fixed_shape=true"])
    assert resolve_config("transformer", "cpu", overrides=["batching.fixed_shape=true"]).batching.fixed_shape


def test_max_updates_alone_is_the_only_limit_and_intervals_are_checked():
    from platform.training.config import resolve_config

    alone = resolve_config("dbsa", "cpu", max_updates=300)
    assert alone.max_updates == 300 and alone.max_epochs is None
    both = resolve_config("dbsa", "cpu", max_updates=300, max_epochs=2)
    assert (both.max_updates, both.max_epochs) == (300, 2)
    assert resolve_config("dbsa", "cpu").max_updates is None  # epochs as before
    assert resolve_config("dbsa", "cpu", overrides=["best_metric=dev_loss"]).best_mode == "min"
    with pytest.raises(ConfigError, match="max_epochs and max_updates cannot both be unset"):
        resolve_config("dbsa", "cpu", overrides=["max_epochs=null"])
    with pytest.raises(ConfigError, match="validate_every must be ≥ 1, got 0"):
        resolve_config("dbsa", "cpu", overrides=["validate_every=0"])
    with pytest.raises(ConfigError, match="best_metric"):
        resolve_config("dbsa", "cpu", overrides=["best_metric=dev_ter"])


@pytest.mark.parametrize("command, typo, meant", [("train", "--max-epohcs=3", "--max-epochs"),
                                                  ("tune --space dbsa", "--num-trails", "--num-trials"),
                                                  ("evaluate", "--lenpn", "--lenpen"),
                                                  ("prepare --out x", "--vocab-szie", "--vocab-size"),
                                                  ("backup --database d --to s3://b", "--kep", "--keep")])
def test_a_mistyped_flag_names_the_closest_flag_in_one_line(command, typo, meant, capsys):
    import importlib

    command, *given = command.split()
    parser = importlib.import_module(f"platform.{command}").build_parser()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args([*given, typo, "1"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and error.endswith(f"unrecognized arguments: {typo} 1; did you mean {meant}?"), error
