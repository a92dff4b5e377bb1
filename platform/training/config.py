"""A training run's config: ``TrainConfig``, the size presets, and the one resolver.

``resolve`` builds a run's config data from a model (or recipe), a size, a YAML file and
``--set`` overrides; ``platform.train`` loads it as is and ``platform.tune`` applies each
trial's knobs to it first.  ``load_train_config`` is the one strict loader (the model's
config class chosen by ``model.name``, recipes' layer fractions resolved).

Nothing here imports pyarrow, sacrebleu or Ray: ``benchmarks.speed`` builds configs with torch
and ``models/`` alone.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from models import MODELS
from models.rnn import RNNConfig
from models.transformer import TransformerConfig
from platform import config_io
from platform.data.batching import BatchingConfig
from platform.errors import ConfigError
from platform.training import recipes

# the model section is one of the models' config classes (models/build.py's table)
ModelConfig = Union[tuple(dict.fromkeys(spec.config_class for spec in MODELS.values()))]  # noqa: UP007


@dataclass(frozen=True, kw_only=True)
class OptimConfig:
    optimizer: Literal["adam", "adadelta"] = "adam"  # AdaDelta: Zeiler 2012 (Yang et al.)
    schedule: Literal["inverse_sqrt", "constant"] = "inverse_sqrt"  # after a linear warm-up
    lr: float = 1e-3  # peak learning rate, reached at the end of warm-up (AdaDelta: its scale, 1.0)
    warmup_steps: int = 400  # linear warm-up (Vaswani et al.: 4000, then inverse square root)
    betas: tuple[float, float] = (0.9, 0.98)  # Adam
    rho: float = 0.95  # AdaDelta's decay (Zeiler 2012)
    eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 1.0  # 0 disables gradient clipping
    label_smoothing: float = 0.1

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.warmup_steps < 0:
            raise ValueError("lr must be positive and warmup_steps non-negative")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if not 0.0 < self.rho < 1.0:
            raise ValueError(f"rho must be in (0, 1), got {self.rho}")


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    beam: int = 1  # 1 = greedy decoding of the dev set each epoch
    alpha: float = 0.6  # length penalty (Wu et al. 2016)
    max_len_a: float = 1.5
    max_len_b: int = 10
    max_sentences: int | None = None  # decode only the first N dev sentences (None = all)
    max_tokens: int = 4000  # dev batch budget


@dataclass(frozen=True, kw_only=True)
class DecodeConfig:
    """How the trained model translates (``evaluate``, ``translate``, the study's test scores):
    each recipe sets its paper's decoding; a flag overrides it.  The hypothesis length is at
    most ``max_len_a × source length + max_len_b`` subwords."""

    beam: int = 4  # 1 = greedy
    alpha: float = 0.6  # length penalty (Wu et al. 2016); 0 = none
    max_len_a: float = 1.5
    max_len_b: int = 10

    def __post_init__(self) -> None:
        if self.beam < 1:
            raise ValueError(f"beam must be ≥ 1, got {self.beam}")
        if self.max_len_a < 0 or self.max_len_b < 1:
            raise ValueError("max_len_a must be ≥ 0 and max_len_b ≥ 1")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    model: ModelConfig
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    max_epochs: int | None = 10  # None: no epoch limit (then max_updates is)
    max_updates: int | None = None  # stop after this many updates in all (whichever limit comes first)
    max_steps_per_epoch: int | None = None  # cut epochs short (smoke runs)
    log_every: int = 100  # updates between progress lines and train metrics in MLflow (0: none)
    validate_every: int | None = None  # updates between dev validations (None: at the end of each epoch)
    save_every: int | None = None  # updates between checkpoints that skip validation (None: at validations only)
    resume_checkpoints: int = 2  # resume checkpoints kept in the run's storage (Ray's num_to_keep)
    best_metric: Literal["dev_bleu", "dev_chrf", "dev_loss"] = "dev_bleu"  # chooses the best checkpoint
    patience: int | None = None  # stop after this many validations without a better best_metric
    average_last: int = 5  # weights of the last N checkpoints kept, for evaluate --average-last (0: none)
    keep_best: int = 0  # weights of the N best validations kept (the best checkpoint itself always is)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: bf16 or fp16 by the GPU, fp32 on CPU
    # torch.compile of the update (step.compiled_update: forward, every loss and backward as one
    # graph, clipping as another); reduce-overhead: with CUDA graphs.  Pair it with
    # batching.bucket (e.g. 8) and fixed_shape so batches come in one shape
    compile: Literal["off", "default", "reduce-overhead"] = "off"
    seed: int = 1
    # bit-identical reruns of a seed on CUDA (context.set_deterministic): every kernel in its
    # deterministic form (PyTorch's use_deterministic_algorithms, cuBLAS's fixed workspace, cuDNN's
    # deterministic RNNs), at a cost docs/performance.md measures; on the CPU training already repeats
    deterministic: bool = False

    def __post_init__(self) -> None:
        if self.max_epochs is None and self.max_updates is None:
            raise ValueError("max_epochs and max_updates cannot both be unset: training would never stop")
        for name in ("max_epochs", "max_updates", "validate_every", "save_every", "max_steps_per_epoch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be ≥ 1, got {value}")
        for name in ("log_every", "average_last", "keep_best"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        if self.resume_checkpoints < 1:
            raise ValueError(f"resume_checkpoints must be ≥ 1 (the checkpoint to resume from), "
                             f"got {self.resume_checkpoints}")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be ≥ 1 validation (or null: no early stopping), got {self.patience}")

    @property
    def best_mode(self) -> Literal["max", "min"]:
        """Whether a larger or a smaller ``best_metric`` is better."""
        return "min" if self.best_metric.endswith("_loss") else "max"


SECTIONS = frozenset(f.name for f in dataclasses.fields(TrainConfig)) - {"model"}
MODEL_SECTION = "model."


def knob_name(config_key: str) -> str:
    """The one name of a config key as a sweep knob, an MLflow param, a summary or report column:
    a model field by its paper name (``model.p_enc`` → ``p_enc``), any other key dotted
    (``optim.lr``)."""
    return config_key[len(MODEL_SECTION):] if config_key.startswith(MODEL_SECTION) else config_key


def knob_key(name: str) -> str:
    """The config key of a knob name (``knob_name``'s inverse; ``model.p_enc`` is taken as is)."""
    return name if name.split(".")[0] in SECTIONS or name.startswith(MODEL_SECTION) else MODEL_SECTION + name


# The model dimensions of each size, per model config class (a new model of an existing class
# needs no entry).  CPU: what ``python -m platform.train --model NAME`` uses without --set;
# sweep: the default of platform.tune on a CPU (many short trials); paper: each recipe's own.
SIZES = {
    "cpu": {
        TransformerConfig: dict(num_encoder_layers=2, num_decoder_layers=2, d_model=128, num_heads=4, d_ff=512,
                                dropout=0.1),
        RNNConfig: dict(d_embed=128, d_hidden=128, dropout=0.2),
    },
    "sweep": {
        TransformerConfig: dict(num_encoder_layers=2, num_decoder_layers=2, d_model=128, num_heads=4, d_ff=512,
                                dropout=0.1),
        RNNConfig: dict(d_embed=128, d_hidden=128, dropout=0.2),
    },
    "smoke": {
        TransformerConfig: dict(num_encoder_layers=2, num_decoder_layers=2, d_model=32, num_heads=4, d_ff=64,
                                dropout=0.1),
        RNNConfig: dict(d_embed=32, d_hidden=32, dropout=0.1),
    },
}
# The rest of a run's defaults per size.  CPU: small batches and a short warm-up, so the demo
# corpus gets a few hundred updates per epoch.
RUN_PRESETS = {
    "cpu": {"max_epochs": 3, "batching": {"max_tokens": 1500}, "optim": {"lr": 2e-3, "warmup_steps": 100}},
    "paper": {"batching": {"max_tokens": 4096}, "optim": {"lr": 7e-4, "warmup_steps": 4000}},
    # 200-update epochs: a trial's start-up (Ray Train's worker group) is paid once per trial, so
    # shorter epochs spend more of a sweep starting trials
    "sweep": {"max_epochs": 4, "max_steps_per_epoch": 200, "eval": {"max_sentences": 200}, "average_last": 0,
              "batching": {"max_tokens": 1500}, "optim": {"warmup_steps": 100}},
    "smoke": {"max_epochs": 2, "max_steps_per_epoch": 8, "eval": {"max_sentences": 40},
              "optim": {"warmup_steps": 10}, "batching": {"max_tokens": 1024}},
}


def model_defaults(name: str, size: str, recipe: str | None = None) -> dict[str, Any]:
    """The model section a run starts from: the model's preset, the size's dimensions (the
    recipe's own under ``paper``), then the recipe's model settings (``training/recipes.py``;
    the model's default recipe when None), which hold at every size.  Fractional parse layers
    (``4/6``) stay fractions until ``load_train_config``."""
    if name not in MODELS:
        raise ConfigError(f"unknown model {name!r}; available: {', '.join(MODELS)}")
    _, found = recipes.recipe_for(name, recipe)
    dims = found.paper_size if size == "paper" else SIZES[size][MODELS[name].config_class]
    return {**MODELS[name].preset, **dims, **found.settings}


def recipe_training(size: str, recipe: recipes.Recipe) -> dict[str, Any]:
    """The rest of a recipe's setup at ``size`` as dotted keys: its training and decoding at
    every size, and under ``paper`` its batches, epochs and learning rate as well."""
    return {**recipe.training, **(recipe.paper_training if size == "paper" else {})}


RENAMED = {"keep_last_epochs": "average_last", "keep_last": "resume_checkpoints"}  # configs made before


def load_train_config(data: dict[str, Any]) -> TrainConfig:
    """Strictly build a TrainConfig; ``model.name`` chooses the model's config class.  A key
    that was renamed (``RENAMED``) is read under its new name."""
    data = {RENAMED.get(key, key): value for key, value in data.items()}
    model = data.pop("model", None)
    if not isinstance(model, dict) or "name" not in model:
        raise ConfigError("the config needs a model section with a name")
    if model["name"] not in MODELS:
        raise ConfigError(f"unknown model {model['name']!r}; available: {', '.join(MODELS)}")
    config_class = MODELS[model["name"]].config_class
    layer_counts = {f.name: f.default for f in dataclasses.fields(config_class)
                    if f.name in recipes.LAYER_KEYS.values()}
    model = recipes.resolve_layers(model, layer_counts)  # p_enc: 4/6 → a layer of this model
    model_config = config_io.from_dict(config_class, model, where="model")
    try:
        model_config.validate()
    except ValueError as error:
        raise ConfigError(f"model: {error}") from None
    config = config_io.from_dict(TrainConfig, {**data, "model": model_config})
    return dataclasses.replace(config, batching=resolve_packing(config.batching, model_config))


def check_dataset(config: TrainConfig, meta: dict[str, Any], where: str) -> None:
    """Refuse in one line a config that the prepared dataset at ``where`` (its ``meta.json``)
    cannot train: ``model.share_all_embeddings`` needs one subword model for both languages."""
    if getattr(config.model, "share_all_embeddings", False) and not meta.get("config", {}).get("joint_vocab"):
        raise ConfigError(f"model.share_all_embeddings: {where} has a subword model per language; "
                          "prepare it with --joint-vocab to share the embeddings")


def resolve_packing(batching: BatchingConfig, model_config) -> BatchingConfig:
    """``batching.pack`` decided: unset, it packs wherever the model can (``packable``: the
    Transformer family); set to true for a model that cannot (the recurrent and tree encoders),
    an error."""
    if batching.pack is None:
        return dataclasses.replace(batching, pack=model_config.packable)
    if batching.pack and not model_config.packable:
        raise ConfigError(f"batching.pack: model {model_config.name!r} cannot train on packed rows "
                          "(only the Transformer family can)")
    return batching


def resolve(model: str, size: str, *, recipe: str | None = None, config_file: str | None = None,
            overrides: Sequence[str] = (), values: dict[str, Any] | None = None, max_epochs: int | None = None,
            max_updates: int | None = None) -> dict[str, Any]:
    """A run's config data: the model's preset, the size's dimensions and the recipe's model
    settings, the size's run preset, the recipe's training and decoding (``recipe_training``),
    then the YAML file, then ``--set`` overrides, then ``values`` (a command's typed flags, by
    config key: taken as they are, not parsed again), then ``max_epochs`` and ``max_updates``
    (with ``max_updates`` alone, it is the only limit) (plain data;
    ``resolve_config`` loads it).  ``platform.train`` loads this; ``platform.tune`` applies each
    trial's knobs to it."""
    data: dict[str, Any] = {"model": model_defaults(model, size, recipe)}
    config_io.merge(data, copy.deepcopy(RUN_PRESETS[size]))
    for key, value in recipe_training(size, recipes.recipe_for(model, recipe)[1]).items():
        config_io.set_dotted(data, key, copy.deepcopy(value))
    if config_file:
        config_io.merge(data, config_io.read_yaml_mapping(config_file))
    for override in overrides:
        config_io.set_dotted(data, *config_io.parse_override(override))
    for key, value in (values or {}).items():
        config_io.set_dotted(data, key, value)
    if max_epochs is not None:
        data["max_epochs"] = max_epochs
    if max_updates is not None:  # the limit: epochs too only where given
        data["max_updates"] = max_updates
        data["max_epochs"] = max_epochs
    named = data["model"].get("name", model)
    if named != model:
        raise ConfigError(f"--model {model} but the config names model {named!r}")
    data["model"]["name"] = model
    return data


def resolve_config(model: str, size: str, **options: Any) -> TrainConfig:
    """``resolve`` loaded: the TrainConfig of one run."""
    return load_train_config(resolve(model, size, **options))
