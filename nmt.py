"""``nmt COMMAND ARGS``: the platform's commands from any directory (``nmt train --model dbsa``
runs ``python -m platform.train --model dbsa``).

``python -m platform.<command>`` works only where the checkout's root is first on ``sys.path``
(its own directory): elsewhere Python finds the standard library's ``platform`` module first
and fails before any of this project's code runs (docs/architecture.md, "Why the package is
called platform").  This console script, installed with the project, puts the directory that
holds the package first, drops the standard library's module if something imported it already,
and runs the command's module as ``__main__``, as ``-m`` does."""

from __future__ import annotations

import difflib
import runpy
import sys
from pathlib import Path

HOME = Path(__file__).resolve().parent  # the checkout (an editable install), or site-packages
COMMANDS = ("backup", "evaluate", "parse", "prepare", "report", "selfcheck", "service", "train", "translate", "tune")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(f"usage: nmt COMMAND [ARGS] (each command's --help says more); commands: {', '.join(COMMANDS)}")
        return 0 if args else 2
    command = args[0]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the commands: {', '.join(COMMANDS)}"
        sys.stderr.write(f"nmt: no command {command!r}; {hint}\n")
        return 2
    sys.path.insert(0, str(HOME))
    found = sys.modules.get("platform")
    if found is not None and Path(getattr(found, "__file__", "") or "").parent != HOME / "platform":
        del sys.modules["platform"]  # the standard library's: the package (a superset of it) replaces it
    sys.argv = [f"nmt {command}", *args[1:]]
    runpy.run_module(f"platform.{command}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
