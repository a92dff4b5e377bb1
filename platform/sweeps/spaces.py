"""Search spaces: strict loading of ``search_spaces/<name>.yaml`` and their use with Optuna.

A space file has ``model``, ``metric``, ``mode``, ``params`` (knob → distribution), optional
``fixed`` (config values for every trial) and ``first_points`` (evaluated first, e.g. the
paper's setting).  A knob is named as everywhere else (``training.config.knob_name``): a model
field by its paper name (``p_enc``, ``dropout``), another section's key dotted (``optim.lr``);
the config key ``model.p_enc`` is accepted for it too.  A distribution is one of

    {type: int,   low: 1, high: 8, log: false}      # high may be encoder_layers / decoder_layers
    {type: float, low: 1e-4, high: 1e-2, log: true}
    {type: categorical, choices: [a, b]}

with an optional ``when: {other.key: value}`` that samples the knob only when the condition
holds (Optuna's define-by-run), and an optional ``grid: [values]``: the values ``--search grid``
tries (categorical knobs use their choices, int knobs of at most 16 values every value).  The
knob ``recipe`` (categorical, paper recipe names) samples the recipe, and with it the model:
each trial starts from its recipe's config, and knobs that only some recipes have carry a
``when: {recipe: ...}`` (``search_spaces/papers.yaml``).  In ``first_points`` a layer index may be a fraction of the
layer count (``4/6``: the paper's layer 4 of 6, scaled to the model by ``recipes.scale_layer``,
the rule every config uses), and ``recipe: NAME`` stands for that paper recipe's knobs
(``training/recipes.py``); keys written next to it win.  An optional top-level ``recipe``
names the recipe the trials' base config starts from (default: the model's own); ``baseline``
names the recipe the confirmation stage compares with (``--confirm``); ``search`` sets the
searcher and scheduler (``sweeps.searcher.SearchSettings``; flags win); ``objectives`` (a list of
``{metric, mode}``) makes the sweep multi-objective, its first being the scheduler's metric.

``load_space`` reads the file once and keeps it, with the trials' base config (as data and
loaded): the space's model and recipe at a size, with ``--set`` overrides, validated with every
first point and a few samples before any trial starts.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from platform import config_io
from platform.errors import ConfigError, UserError
from platform.sweeps.searcher import SearchSettings
from platform.training import recipes
from platform.training.config import TrainConfig, knob_key, knob_name, load_train_config, resolve
from search_spaces import SPACES

LAYER_SYMBOLS = {"encoder_layers": "num_encoder_layers", "decoder_layers": "num_decoder_layers"}
RECIPE_KNOB = "recipe"
GRID_ALL_INTS = 16  # an int knob with at most this many values is gridded over all of them


@dataclass(frozen=True, kw_only=True)
class Distribution:
    type: Literal["int", "float", "categorical"]
    low: int | float | str | None = None
    high: int | float | str | None = None
    log: bool = False
    choices: tuple[Any, ...] | None = None
    when: dict[str, Any] = field(default_factory=dict)
    grid: tuple[Any, ...] | None = None  # the values --search grid tries (numeric knobs)

    def __post_init__(self) -> None:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical distribution needs choices")
        elif self.low is None or self.high is None:
            raise ValueError(f"an {self.type} distribution needs low and high")


@dataclass(frozen=True, kw_only=True)
class Objective:
    metric: str
    mode: Literal["max", "min"] = "max"


@dataclass(frozen=True, kw_only=True)
class SpaceFile:
    model: str | None = None  # None: the knob ``recipe`` samples the model
    recipe: str | None = None  # the base config's recipe (default: the model's own)
    baseline: str | None = None  # the recipe --confirm compares with
    metric: str = "dev_bleu"
    mode: Literal["max", "min"] = "max"
    objectives: list[Objective] = field(default_factory=list)  # several: a multi-objective sweep
    search: SearchSettings = field(default_factory=SearchSettings)
    params: dict[str, Distribution]
    fixed: dict[str, Any] = field(default_factory=dict)
    first_points: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Space:
    """A loaded space: its file (as read, and parsed), the trials' base configs (plain data,
    validated) and the first one loaded, which resolves the layer symbols."""

    name: str
    path: Path
    text: str  # the space file as read (the sweep's parent run logs it)
    spec: SpaceFile
    bases: dict[str, dict[str, Any]]  # recipe name → the base config of its trials
    base_config: TrainConfig  # ``base``, loaded: what every trial shares (limits, seed, layer counts)
    baseline_config: dict[str, Any] | None = None  # the baseline recipe's config (--confirm)

    @property
    def base(self) -> dict[str, Any]:
        """The base config of the space's (first) recipe, as data."""
        return next(iter(self.bases.values()))

    @property
    def layers(self) -> dict[str, int]:
        """The layer symbols (``encoder_layers``) as the trials' model counts them."""
        return {symbol: getattr(self.base_config.model, name, 0) for symbol, name in LAYER_SYMBOLS.items()}

    @property
    def recipe(self) -> str:
        """The recipe the trials' base config starts from (the space's, else its model's default;
        the first choice of a ``recipe`` knob)."""
        return next(iter(self.bases))

    @property
    def model(self) -> str:
        """The space's model, or ``mixed`` where the knob ``recipe`` samples it."""
        return self.spec.model or "mixed"

    def recipe_of(self, sampled: dict[str, Any]) -> str:
        return str(sampled.get(RECIPE_KNOB, self.recipe))

    def model_of(self, sampled: dict[str, Any]) -> str:
        return self.bases[self.recipe_of(sampled)]["model"]["name"]

    @property
    def knobs(self) -> list[str]:
        return list(self.spec.params)

    @property
    def objectives(self) -> list[tuple[str, str]]:
        """(metric, mode) of each objective: the space's ``objectives``, else its ``metric``."""
        if self.spec.objectives:
            return [(o.metric, o.mode) for o in self.spec.objectives]
        return [(self.spec.metric, self.spec.mode)]

    def with_objectives(self, given: Sequence[str]) -> Space:
        """The space with ``METRIC:MODE`` objectives (``--objective``) instead of its own."""
        objectives = []
        for text in given:
            metric, _, mode = text.partition(":")
            if not metric or mode not in ("max", "min"):
                raise UserError(f"--objective {text!r}: expected METRIC:max or METRIC:min")
            objectives.append(Objective(metric=metric, mode=mode))
        spec = dataclasses.replace(self.spec, objectives=objectives, metric=objectives[0].metric,
                                   mode=objectives[0].mode)
        return dataclasses.replace(self, spec=spec)

    def grid(self) -> dict[str, list[Any]]:
        """Every knob's grid values (``--search grid``): its ``grid``, its choices, or every value
        of a small int range; a knob with none is refused."""
        values = {}
        for key, dist in self.spec.params.items():
            if dist.grid is not None:
                values[key] = list(dist.grid)
            elif dist.type == "categorical":
                values[key] = list(dist.choices)
            elif dist.type == "int" and int(self.bounds(key)[1]) - int(self.bounds(key)[0]) < GRID_ALL_INTS:
                values[key] = list(range(int(self.bounds(key)[0]), int(self.bounds(key)[1]) + 1))
            else:
                raise ConfigError(f"{self.path}: params.{key} needs grid values for --search grid "
                                  f"(e.g. {key}: {{..., grid: [a, b, c]}})")
        return values

    def bounds(self, key: str) -> tuple[Any, Any]:
        dist = self.spec.params[key]
        resolve = lambda v: self.layers[v] if isinstance(v, str) and v in LAYER_SYMBOLS else v  # noqa: E731
        return resolve(dist.low), resolve(dist.high)

    def define_by_run(self, trial) -> None:
        """Sample every knob whose condition holds (Optuna define-by-run)."""
        for key, dist in self.spec.params.items():
            if any(trial.params.get(k, _MISSING) != v for k, v in dist.when.items()):
                continue
            if dist.type == "categorical":
                trial.suggest_categorical(key, list(dist.choices))
            elif dist.type == "int":
                low, high = self.bounds(key)
                trial.suggest_int(key, int(low), int(high), log=dist.log)
            else:
                low, high = self.bounds(key)
                trial.suggest_float(key, float(low), float(high), log=dist.log)

    def first_points(self) -> list[dict[str, Any]]:
        """The space's first points with fractions of the layer count resolved."""
        points = []
        for point in self.spec.first_points:
            resolved = {}
            for key, value in self._expand_recipe(point).items():
                if key in self.spec.params and self.spec.params[key].type == "int":
                    value = recipes.scale_layer(value, int(self.bounds(key)[1]))
                resolved[key] = value
            points.append(resolved)
        return points

    def _expand_recipe(self, point: dict[str, Any]) -> dict[str, Any]:
        """``recipe: NAME`` → that recipe's settings of this space's knobs, then the point's keys."""
        point = dict(point)
        name = point.pop("recipe", None)
        if name is None:
            return point
        recipe = recipes.get_recipe(str(name))
        if RECIPE_KNOB in self.spec.params:
            return {RECIPE_KNOB: str(name), **point}
        if recipe.model != self.spec.model:
            raise ConfigError(f"space {self.name}: first point recipe {name} is a {recipe.model} recipe, "
                              f"not {self.spec.model}")
        knobs = {key: value for key, value in {**recipe.settings, **recipe.training}.items() if key in self.spec.params}
        unset = sorted(key for key, value in knobs.items() if value is None and key not in point)
        if unset:
            raise ConfigError(f"space {self.name}: first point recipe {name} leaves {', '.join(unset)} unset, "
                              "which a knob cannot sample; give the value in the point")
        return {**knobs, **point}

    def sample(self, seed: int = 0) -> dict[str, Any]:
        """One config drawn from the space (for --dry-run and tests)."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
        trial = study.ask()
        self.define_by_run(trial)
        return dict(trial.params)

    def trial_config(self, sampled: dict[str, Any]) -> dict[str, Any]:
        """The full config data of one trial: its recipe's base, then ``fixed``, then the sampled
        knobs."""
        data = copy.deepcopy(self.bases[self.recipe_of(sampled)])
        for name, value in {**self.spec.fixed, **sampled}.items():
            if name != RECIPE_KNOB:
                config_io.set_dotted(data, knob_key(name), value)
        return data


_MISSING = object()


def _knob_names(raw: dict[str, Any]) -> dict[str, Any]:
    """The space file with every knob under its one name (``model.p_enc`` → ``p_enc``)."""
    rename = lambda mapping: {knob_name(k): v for k, v in mapping.items()} if isinstance(mapping, dict) else mapping  # noqa: E731
    raw = dict(raw)
    for section in ("params", "fixed"):
        if section in raw:
            raw[section] = rename(raw[section])
    if isinstance(raw.get("params"), dict):
        raw["params"] = {k: {**v, "when": rename(v["when"])} if isinstance(v, dict) and "when" in v else v
                         for k, v in raw["params"].items()}
    if isinstance(raw.get("first_points"), list):
        raw["first_points"] = [rename(point) for point in raw["first_points"]]
    return raw


def space_path(name: str) -> Path:
    """A built-in space by name (``dbsa``), or a space YAML file of your own."""
    if name in SPACES:
        return Path(SPACES[name])
    if name.endswith((".yaml", ".yml")):
        if not Path(name).is_file():
            raise UserError(f"{name}: search space file not found")
        return Path(name)
    raise UserError(f"unknown search space {name!r}; available: {', '.join(SPACES)}, or a .yaml file")


def load_space(name: str, size: str = "sweep", overrides: Sequence[str] = (), max_epochs: int | None = None) -> Space:
    """Load space ``name`` (read once) with its trials' base configs (``_trial_base``, one per
    recipe it samples); every first point and a few samples are validated against them."""
    path = space_path(name)
    raw = _knob_names(config_io.read_yaml_mapping(path))
    text = path.read_text(encoding="utf-8")  # readable: read_yaml_mapping read it
    params = raw.get("params")
    if not isinstance(params, dict) or not params:
        raise ConfigError(f"{path}: a space needs a non-empty params mapping")
    raw = {**raw, "params": {key: config_io.from_dict(Distribution, spec, where=f"{path}: params.{key}")
                             for key, spec in params.items()}}
    spec = config_io.from_dict(SpaceFile, raw, where=str(path))
    if max_epochs is None:
        max_epochs = spec.search.max_epochs
    if spec.objectives:  # the first objective is the sweep's metric (the scheduler's, the summary's order)
        spec = dataclasses.replace(spec, metric=spec.objectives[0].metric, mode=spec.objectives[0].mode)
    loaded = {name: _trial_base(recipe.model, name, size, overrides, max_epochs)
              for name, recipe in _space_recipes(spec, path).items()}
    baseline = None
    if spec.baseline is not None:
        baseline_recipe = _get_recipe(spec.baseline, path, "baseline")
        baseline, _ = _trial_base(baseline_recipe.model, spec.baseline, size, overrides, max_epochs)
    space = Space(name=name, path=path, text=text, spec=spec, bases={k: data for k, (data, _) in loaded.items()},
                  base_config=next(iter(loaded.values()))[1], baseline_config=baseline)
    _validate(space, path)
    return space


def _get_recipe(name: str, path: Path, where: str):
    try:
        return recipes.get_recipe(str(name))
    except (KeyError, ConfigError, UserError):
        raise ConfigError(f"{path}: {where}: unknown recipe {name!r}; recipes: {', '.join(recipes.RECIPES)}") from None


def _space_recipes(spec: SpaceFile, path: Path) -> dict[str, Any]:
    """The recipes the space's trials start from: the choices of its ``recipe`` knob, else its
    model's (or its top-level ``recipe``)."""
    knob = spec.params.get(RECIPE_KNOB)
    if knob is None:
        if spec.model is None:
            raise ConfigError(f"{path}: a space needs a model, or a categorical knob recipe that samples it")
        name, recipe = recipes.recipe_for(spec.model, spec.recipe)
        return {name: recipe}
    if knob.type != "categorical" or knob.when:
        raise ConfigError(f"{path}: params.{RECIPE_KNOB} must be categorical over recipe names, without when")
    if spec.model is not None or spec.recipe is not None:
        raise ConfigError(f"{path}: a space whose knob recipe samples the model sets no model or recipe")
    return {str(name): _get_recipe(str(name), path, f"params.{RECIPE_KNOB}") for name in knob.choices}


def _trial_base(model: str, recipe: str | None, size: str, overrides: Sequence[str],
                max_epochs: int | None) -> tuple[dict[str, Any], TrainConfig]:
    """A trial's base config, as data and loaded: ``model`` and ``recipe`` at ``size``
    (``training.config.resolve``, as ``platform.train`` resolves), ``--set`` ``overrides`` and
    ``max_epochs``.  Early stopping stays as the recipe or ``--set patience=N`` has it: a trial
    that stops itself is complete, one the scheduler stops is pruned."""
    base = resolve(model, size, recipe=recipe, overrides=overrides, max_epochs=max_epochs)
    config = load_train_config(base)  # a bad --set fails here
    _check_epoch_reports(config)
    return base, config


def _check_epoch_reports(config) -> None:
    """A sweep's scheduler counts a trial's reports as epochs (ASHA's rungs, its ``max_t``): a
    trial validates and reports once per epoch, so update intervals and limits are refused."""
    for key in ("max_updates", "validate_every", "save_every"):
        if getattr(config, key) is not None:
            raise ConfigError(f"{key}: a sweep's trials report once per epoch (ASHA counts epochs); "
                              "shorten epochs with max_steps_per_epoch instead")
    if config.max_epochs is None:
        raise ConfigError("max_epochs: a sweep needs an epoch limit (ASHA's max_t)")


def _validate(space: Space, path: Path) -> None:
    """Every knob and fixed key must be a real config key of the model, and configs must load."""
    for point in space.spec.first_points:
        if RECIPE_KNOB in space.spec.params:
            continue  # the point's recipe is the trial's base: nothing of it is lost
        _, base_recipe = recipes.recipe_for(space.spec.model, space.spec.recipe)
        recipe = recipes.get_recipe(str(point["recipe"])) if "recipe" in point else None
        for key, value in (recipe.settings.items() if recipe else ()):
            if key not in space.spec.params and base_recipe.settings.get(key, value) != value:
                raise ConfigError(f"{path}: first point recipe {point['recipe']} sets {key}={value!r}, which is "
                                  f"not a knob of the space and differs from the space's base recipe "
                                  f"({base_recipe.settings[key]!r}); add a top-level recipe or make it a knob")
    for point in space.first_points() + [space.sample(seed) for seed in range(6)]:
        unknown = set(point) - set(space.spec.params)
        if unknown:
            raise ConfigError(f"{path}: first point sets {sorted(unknown)}, which are not knobs of the space")
        try:
            load_train_config(space.trial_config(point))
        except ConfigError as error:
            raise ConfigError(f"{path}: {error}") from None


def knob_names() -> list[str]:
    """Every knob of the built-in spaces and every setting of the papers' recipes, by its one
    name, in a stable order (the columns of ``platform.report``)."""
    names: dict[str, None] = {}
    for path in SPACES.values():
        raw = _knob_names(config_io.read_yaml_mapping(path))
        names.update(dict.fromkeys(raw.get("params", {})))
        names.update(dict.fromkeys(raw.get("fixed", {})))
    for recipe in recipes.RECIPES.values():  # with their training and decoding: what each row ran
        names.update(dict.fromkeys(recipe.settings))
        names.update(dict.fromkeys(recipe.training))
    return list(names)
