"""argparse flags that several commands share, declared once (not a command itself)."""

from __future__ import annotations

import argparse

from platform.errors import UserError
from platform.redaction import redact

TRACKING_URI_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"
DATA_HELP = ("'demo' (the built-in synthetic corpus), 'demo-large' (its harder version) or a prepared dataset "
             "directory")


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
