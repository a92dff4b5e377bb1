"""User-facing errors and the one CLI wrapper that turns them into a clean exit.

A user error (bad input file, bad flag, bad config) is reported as one line on stderr,
``error: FILE:LINE: problem``, with exit status 2 and no traceback (docs/architecture.md).
Programming errors still raise normally: a traceback there is what a developer needs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from platform.redaction import RedactingStream


class UserError(Exception):
    """Any error the user can fix: the message is the whole report."""


class InputError(UserError):
    """A problem at a place in an input file (``path:line: message``)."""

    def __init__(self, path: str, line: int | None, message: str):
        self.path, self.line, self.message = str(path), line, message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


class ConfigError(UserError):
    """An invalid configuration key or value."""


def run_cli(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None, *,
            data_on_stdout: bool = False) -> None:
    """Run ``main(argv)`` and exit: 0 on success, 2 with a one-line message on a user error,
    130 on Ctrl-C, 141 (quietly) when the reader of its output went away.

    What the command shows passes through ``redaction.redact``: stderr always, stdout too unless
    it carries the command's data (``data_on_stdout``: translations), which stays as is."""

    sys.stderr = RedactingStream(sys.stderr)
    if not data_on_stdout:
        sys.stdout = RedactingStream(sys.stdout)
    try:
        status = main(argv)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:  # the reader left (``| head``): stop quietly, as a killed pipe writer does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        sys.exit(141)
    except OSError as error:  # the environment: unwritable directory, full disk, missing file
        print(f"error: {describe_os_error(error)}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(status or 0)


def describe_os_error(error: OSError) -> str:
    """``cannot write /out/x: No space left on device`` from any OSError, in one line."""
    reason = error.strerror or str(error) or type(error).__name__
    if error.filename is None:
        return reason
    target = f"{error.filename} -> {error.filename2}" if error.filename2 else str(error.filename)
    return f"{target}: {reason}"
