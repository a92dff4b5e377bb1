"""Strict typed configs: frozen keyword-only dataclasses loaded from YAML and ``--set`` overrides.

Every component declares its config as ``@dataclass(frozen=True, kw_only=True)`` next to its
code.  This module only knows how to build such a dataclass from plain data, strictly:

* an unknown key is an error that names the closest valid keys (``difflib``), or lists them
  all where none is close;
* a value of the wrong type is an error naming the key, the expected type and the value
  (ints are accepted where a float is expected; nothing else is coerced);
* nested dataclasses are nested mappings in YAML and dotted keys in ``--set`` (``model.d_model=512``);
* ``to_dict`` / ``dump_yaml`` write the resolved config back; loading it again gives an equal
  object (round trip).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from platform.errors import ConfigError

C = TypeVar("C")


@functools.cache
def _loader():
    """YAML with the float syntax of YAML 1.2, so ``lr: 5e-4`` is a number, not a string.

    Built on first use: importing this module (and the configs declared with it) needs no
    PyYAML, so ``benchmarks.speed`` runs with torch and ``models/`` alone."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
            |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
            |\.[0-9_]+(?:[eE][-+][0-9]+)?
            |[-+]?\.(?:inf|Inf|INF)
            |\.(?:nan|NaN|NAN))$""", re.X),
        list("-+0123456789."),
    )
    return Loader


def yaml_load(text: str):
    """Plain data from YAML text: a SafeLoader (no Python objects) with YAML 1.2's floats."""
    import yaml

    _Loader = _loader()  # a SafeLoader
    return yaml.load(text, Loader=_Loader)


def from_dict(cls: type[C], data: Mapping[str, Any], *, where: str = "") -> C:
    """Build dataclass ``cls`` from ``data``; unknown keys and wrong types raise ConfigError."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(unknown_keys_message(unknown, sorted(fields), where))
    hints = get_type_hints(cls)
    values = {name: _convert(hints[name], value, _join(where, name)) for name, value in data.items()}
    missing = [n for n, f in fields.items() if n not in values and _is_required(f)]
    if missing:
        raise ConfigError(f"missing required config key(s): {', '.join(_join(where, m) for m in missing)}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:  # __post_init__ validation
        raise ConfigError(f"{where or cls.__name__}: {error}") from None


def unknown_keys_message(unknown: list[str], valid: list[str], where: str = "") -> str:
    """One line for keys that are not ``valid``: the closest valid key of each (``difflib``),
    else every valid key."""
    import difflib

    close = {key: difflib.get_close_matches(key, valid, n=1, cutoff=0.6) for key in unknown}
    named = ", ".join(repr(_join(where, key)) for key in unknown)
    message = f"unknown config key{'s' if len(unknown) > 1 else ''} {named}"
    if all(close.values()):
        guesses = [repr(_join(where, guess)) for key in unknown for guess in close[key]]
        return f"{message}; did you mean {' or '.join(dict.fromkeys(guesses))}?"
    return f"{message}; valid keys: {', '.join(valid)}"


def to_dict(config: Any) -> dict[str, Any]:
    """The config as plain YAML-able data (tuples become lists)."""
    return _plain(dataclasses.asdict(config))


def flat_dict(config: Any) -> dict[str, Any]:
    """The config as one flat mapping with dotted keys (for MLflow params)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                walk(_join(prefix, key), sub)
        else:
            out[prefix] = value

    walk("", to_dict(config))
    return out


def dump_yaml(config: Any, path: str | Path | None = None) -> str:
    """Write the resolved config as YAML (to ``path`` if given) and return the text."""
    import yaml

    text = yaml.safe_dump(to_dict(config), sort_keys=False, allow_unicode=True)
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


def load(cls: type[C], yaml_path: str | Path | None = None, overrides: Iterable[str] = ()) -> C:
    """Build ``cls`` from an optional YAML file, then apply ``key=value`` overrides."""
    data: dict[str, Any] = {}
    if yaml_path is not None:
        data = read_yaml_mapping(yaml_path)
    for override in overrides:
        key, value = parse_override(override)
        set_dotted(data, key, value)
    return from_dict(cls, data)


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read config: {error}") from None
    try:
        data = yaml_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: invalid YAML: {getattr(error, 'problem', error)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must hold a mapping, got {type(data).__name__}")
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """``"model.d_model=512"`` → ``("model.d_model", 512)``; the value is parsed as YAML."""
    import yaml

    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects key=value, got {text!r}")
    try:
        value = yaml_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def replace(config: C, **changes: Any) -> C:
    """``dataclasses.replace`` with the same strict checking as loading."""
    data = to_dict(config)
    for key, value in changes.items():
        set_dotted(data, key, value)
    return from_dict(type(config), data)


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """``data["a"]["b"] = value`` for key ``"a.b"``, creating sections; the one dotted-key setter."""
    *parents, last = key.split(".")
    node = data
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}: {part!r} is not a section")
        node = child
    node[last] = value


def merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    """Merge ``extra`` into ``base`` in place, section by section (``extra`` wins)."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value


# --------------------------------------------------------------------------- internals


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _is_required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _type_name(tp: Any) -> str:
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if get_origin(tp) in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any, where: str) -> Any:
    """Check ``value`` against annotation ``tp``; return it (tuples/dataclasses rebuilt)."""
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if dataclasses.is_dataclass(value) and isinstance(value, tp):
            return value
        return from_dict(tp, value, where=where)
    if origin is Literal:
        if value in get_args(tp) and type(value) in {type(a) for a in get_args(tp)}:
            return value
        raise ConfigError(f"{where}: expected one of {_type_name(tp)}, got {value!r}")
    if origin in (Union, types.UnionType):
        for option in get_args(tp):
            try:
                return _convert(option, value, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        key_type, value_type = get_args(tp) or (Any, Any)
        return {_convert(key_type, k, where): _convert(value_type, v, f"{where}.{k}") for k, v in value.items()}
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        args = get_args(tp)
        item_type = args[0] if args else Any
        items = [_convert(item_type, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    return _convert_scalar(tp, value, where)


def _convert_scalar(tp: Any, value: Any, where: str) -> Any:
    if tp is Any:
        return value
    if tp is type(None):
        if value is None:
            return None
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")


__all__ = [
    "dump_yaml",
    "flat_dict",
    "from_dict",
    "load",
    "merge",
    "parse_override",
    "read_yaml_mapping",
    "replace",
    "set_dotted",
    "to_dict",
]
