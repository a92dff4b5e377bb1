"""Declarative search spaces for ``python -m platform.tune --space NAME`` (docs/architecture.md).

One YAML file per space; ``SPACES`` names them explicitly (no directory scanning).  The format
and its strict validation live in ``platform/sweeps/spaces.py``.
"""

from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent
SPACES = {
    "dbsa": DIRECTORY / "dbsa.yaml",
    "deprel": DIRECTORY / "deprel.yaml",
    "gumbel": DIRECTORY / "gumbel.yaml",
    "hier": DIRECTORY / "hier.yaml",
    "baseline": DIRECTORY / "baseline.yaml",
    "papers": DIRECTORY / "papers.yaml",
}
