"""Summary tables as markdown and CSV (sweep summaries, ``platform.report``)."""

from __future__ import annotations

import csv
import io
from typing import Any


def format_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table (also readable as plain text)."""
    if not rows:
        return "(no trials)"
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cell = lambda v: f"{v:.4g}" if isinstance(v, float) else ("" if v is None else str(v))  # noqa: E731
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def to_csv(rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
