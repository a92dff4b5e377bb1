"""What a sweep shows on the terminal: one line when a trial starts, one per trial and epoch,
one when it ends, a compact table of all trials every few minutes, then the summary.

The rest stays off the terminal: the Python logging of Ray, MLflow, Alembic and Optuna and the
raylet's warnings go to ``console.log``; Train workers' own output (their per-report dumps)
stays in Ray's session logs (``/tmp/ray/session_latest/logs``), a failed trial's traceback in
its ``error.txt``; Tune's tables are off.  ``platform.tune --verbose`` shows all of it again.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

from platform.redaction import RedactingFormatter, RedactingStream, redact
from platform.tracking.tables import format_table, number
from platform.training.metrics import SHOWN, shown
from platform.training.stopping import trial_status

QUIET_LOGGERS = ("ray", "mlflow", "alembic", "optuna")  # their console output goes to the log file


def quiet_logging(log_file: Path) -> Path:
    """Send the Python logging of Ray, MLflow, Alembic and Optuna in this process to ``log_file``
    instead of the terminal (call before ``ray.init``, which warns while it starts)."""
    import mlflow  # noqa: F401 - they install their console handlers on import: replace them after
    import optuna
    import ray  # noqa: F401

    optuna.logging.disable_default_handler()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.propagate = False
        if logger.level == logging.NOTSET or logger.level < logging.INFO:
            logger.setLevel(logging.INFO)
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"  # Tune's new console prints its header box even at verbose=0
    sys.stdout = _RayletLineFilter(sys.stdout, handler.stream)
    return log_file


class _RayletLineFilter(RedactingStream):
    """The terminal minus the raylet's warnings: Ray prints them to the driver's ``sys.stdout``
    with a ``(raylet)`` prefix whatever ``log_to_driver`` says (e.g. "8 PYTHON worker processes
    have been started"); those lines go to the log file instead (redacted, as the log's records)."""

    def __init__(self, terminal, log) -> None:
        super().__init__(terminal)
        self.log, self.pending = log, ""
        self.lock = threading.Lock()  # Ray's error-message thread writes too

    def write(self, text: str) -> int:
        with self.lock:
            self.pending += text
            *lines, self.pending = self.pending.split("\n")
            for line in lines:
                if _ANSI.sub("", line).lstrip().startswith("(raylet)"):
                    self._to_log(redact(line) + "\n")
                else:
                    self.stream.write(line + "\n")
        return len(text)

    def _to_log(self, text: str) -> None:
        try:
            self.log.write(text)
        except (ValueError, OSError):  # the log closed (interpreter exit): the line is only Ray's warning
            pass

    def flush(self) -> None:
        with self.lock:
            if self.pending:
                self.stream.write(self.pending)
                self.pending = ""
        self.stream.flush()
        try:
            self.log.flush()
        except (ValueError, OSError):
            pass


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def console_log_path(storage_path: str, sweep: str) -> Path:
    """Where a quiet sweep's Ray and MLflow console output goes: ``console.log`` in the sweep's
    directory (a local storage path), else in the temporary directory."""
    import tempfile

    if "://" in storage_path:
        return Path(tempfile.gettempdir()) / f"{sweep}-console.log"
    return Path(storage_path) / sweep / "console.log"


def knob_text(config: dict[str, Any], knobs: list[str]) -> str:
    return "  ".join(f"{key}={number(config[key])}" for key in knobs if config.get(key) is not None)


def epoch_text(result: dict[str, Any], max_epochs: int) -> str:
    parts = [f"epoch {int(result.get('training_iteration', 0))}/{max_epochs}"]
    parts += [f"{key} {SHOWN[key].format(result[key])}" for key in shown("progress")
              if isinstance(result.get(key), (int, float)) and math.isfinite(result[key])]
    return "  ".join(parts)


def live_table(trials, knobs: list[str], metric: str, max_epochs: int) -> str:
    """Every trial so far: status (as the summary names it), epochs, latest ``metric``, knobs."""
    rows = []
    for trial in trials:
        result = trial.last_result or {}
        epochs = int(result.get("training_iteration", 0))
        status = trial_status(result, max_epochs) if trial.status == "TERMINATED" else trial.status
        row = {"trial": trial.trial_id, "status": status, "epoch": epochs}
        if isinstance(result.get(metric), (int, float)):
            row[metric] = float(result[metric])
        rows.append({**row, **{k: trial.config.get(k) for k in knobs}})
    return format_table(rows)


def first_error_line(trial) -> str:
    """The last line of a failed trial's error (Ray's error file holds the whole traceback)."""
    path = getattr(trial, "error_file", None) or ""
    try:
        lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError:
        return "see the trial's error.txt"
    return lines[-1].strip() if lines else "see the trial's error.txt"
