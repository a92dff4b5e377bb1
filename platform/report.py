"""``python -m platform.report --experiment NAME --out DIR``: compare every run of an experiment.

Writes ``report.md``, ``report.csv`` and plots into DIR: a row per training run, mean ± std over
seeds, every model's best run tested against the best ``transformer`` baseline, each sweep's
confirmation table (``tracking.comparison`` says what each holds); everything is also logged to
the experiment's latest sweep parent run (if there is one).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from platform import flags
from platform.errors import run_cli
from platform.flags import TRACKING_URI_HELP
from platform.launch.spaces import knob_names
from platform.tracking.comparison import compare


def build_parser() -> argparse.ArgumentParser:
    parser = flags.ArgumentParser(prog="python -m platform.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", required=True, help="MLflow experiment name")
    parser.add_argument("--out", required=True, metavar="DIR", help="where to write report.md, report.csv and plots")
    parser.add_argument("--tracking-uri", help=TRACKING_URI_HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    knobs = knob_names() + ["d_model"]  # every built-in space's and recipe's knob, under its one name; the size
    compare(args.experiment, Path(args.out), knobs, args.tracking_uri)
    return 0


if __name__ == "__main__":
    run_cli(main)
