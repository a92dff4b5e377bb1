"""Summary tables as markdown and CSV (sweep summaries, confirmations, ``platform.report``)."""

from __future__ import annotations

import csv
import io
import statistics
from typing import Any

from platform.training.metrics import SHOWN


def number(value: Any) -> str:
    """A knob's value as people read it: 3 significant digits (``0.3``, ``0.00032``, ``121``)."""
    if isinstance(value, bool) or not isinstance(value, float):
        return "" if value is None else str(value)
    return f"{value:.3g}"


def mean_std(values: list[float]) -> str:
    """Values over seeds as ``mean ± standard deviation`` (n - 1); one value alone, with no
    spread to show (``± 0.00`` would claim seeds that agree)."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}"


def format_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table (also readable as plain text); metrics in their ``training.metrics.SHOWN``
    format (BLEU ``21.73``, never ``1.163e-37``), other numbers by ``number``."""

    if not rows:
        return "(no trials)"
    columns = list(dict.fromkeys(key for row in rows for key in row))

    def cell(column: str, value: Any) -> str:
        if column in SHOWN and isinstance(value, (int, float)) and not isinstance(value, bool):
            return SHOWN[column].format(value)
        return number(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(c, row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def to_csv(rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
