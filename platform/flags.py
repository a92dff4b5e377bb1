"""argparse flags that several commands share, declared once (not a command itself), and the
flags of a command declared once, as the fields of its request dataclass (``flag``,
``add_flags``): each with its type (the field's annotation), default and help."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from platform.errors import UserError
from platform.redaction import redact

TRACKING_URI_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"
DATA_HELP = ("'demo' (the built-in synthetic corpus), 'demo-large' (its harder version) or a prepared dataset "
             "directory")


def flag(help: str, *, default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING,
         names: Sequence[str] = (), metavar: str | None = None, choices: Sequence[str] | None = None,
         type: Callable[[str], Any] | None = None) -> Any:
    """A field of a command's request that is also its flag (``--field-name`` unless ``names``);
    no default: a required flag.  ``type`` parses the value where the annotation's own type
    cannot (a duration)."""
    spec = {"help": help, "names": tuple(names), "metavar": metavar, "choices": choices, "type": type}
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"flag": spec})


def add_flags(parser: argparse.ArgumentParser, request: type) -> None:
    """A flag for each ``flag`` field of the dataclass ``request``, in field order, its ``dest``
    the field's name: ``bool`` a switch, ``list[str]`` repeatable, ``X | None`` optional."""
    hints = typing.get_type_hints(request)
    for field in dataclasses.fields(request):
        spec = field.metadata.get("flag")
        if spec is None:  # set by the command, not by a flag (its start time)
            continue
        kwargs: dict[str, Any] = {"dest": field.name, "help": spec["help"]}
        kwargs.update({key: spec[key] for key in ("metavar", "choices") if spec[key] is not None})
        kind = _flag_type(hints[field.name])
        if kind is bool:
            kwargs["action"] = "store_true"
        elif kind is list:
            kwargs.update(action="append", default=[])
        else:
            if spec["type"] is not None or kind is not str:
                kwargs["type"] = spec["type"] or kind
            if field.default is not dataclasses.MISSING:
                kwargs["default"] = field.default
            elif field.default_factory is not dataclasses.MISSING:
                kwargs["default"] = field.default_factory()
            else:
                kwargs["required"] = True
        parser.add_argument(*(spec["names"] or ("--" + field.name.replace("_", "-"),)), **kwargs)


def _flag_type(annotation: Any) -> type:
    """``int`` of ``int | None``, ``list`` of ``list[str]``, else the annotation."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        (annotation,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return typing.get_origin(annotation) or annotation


def parse_duration(text: str) -> float:
    """``90m``, ``2h``, ``45s``, ``1.5h`` or plain seconds → seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:
        seconds = float(number) * unit
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90m, 2h, 3600)") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"a time budget must be positive, not {text!r}")
    return seconds


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose error for a flag it does not know names the closest flag it does
    (``--max-epohcs``: did you mean --max-epochs?)."""

    def error(self, message: str):
        if message.startswith("unrecognized arguments: "):
            message += closest_flags(message.removeprefix("unrecognized arguments: ").split(),
                                     [flag for flag in self._option_string_actions if flag.startswith("--")])
        super().error(message)


def closest_flags(given: list[str], known: list[str]) -> str:
    """``; did you mean --x?`` for the unknown flags in ``given`` that are close to one of
    ``known`` (``--flag=value`` compared by its flag), else the empty string."""
    import difflib

    guesses = [close[0] for arg in given if arg.startswith("--")
               for close in [difflib.get_close_matches(arg.split("=", 1)[0], known, n=1, cutoff=0.6)] if close]
    return f"; did you mean {' or '.join(dict.fromkeys(guesses))}?" if guesses else ""


def add_model_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """The flags of every command that uses a trained model (``platform.evaluate``,
    ``platform.translate``): which model (``required``: one of ``--run``, ``--checkpoint``), how
    it decodes, where it runs.  Either flag repeated: an ensemble (``models.ensemble``)."""
    which = parser.add_mutually_exclusive_group(required=required)
    which.add_argument("--run", metavar="RUN_ID", action="append",
                       help="an MLflow run of platform.train (its best checkpoint); repeat for an ensemble")
    which.add_argument("--checkpoint", metavar="PATH", action="append",
                       help="a checkpoint.pt file; repeat for an ensemble")
    parser.add_argument("--beam", type=int, help="beam size (default: the run's recipe's decoding; 1 = greedy)")
    parser.add_argument("--lenpen", type=float,
                        help="length penalty α of Wu et al. (default: the run's recipe's; 0 = none)")
    parser.add_argument("--tracking-uri", help=TRACKING_URI_HELP)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--average-last", type=int, metavar="N",
                        help="average the weights of the last N checkpoints the run kept (Vaswani et al.: 5) "
                             "instead of the best checkpoint")


def no_password(flag: str, value: str | None, instead: str) -> None:
    """Refuse a credential in a flag's value: a command line shows in ``ps`` to every user of the
    machine and is kept as a Ray job's entrypoint (a sweep submitted as a job), so a password
    comes from the environment or a file (``instead``)."""
    if value and redact(value) != value:
        raise UserError(f"{flag} {redact(value)}: a password on the command line shows in ps and in a Ray job's "
                        f"stored entrypoint; {instead}")
