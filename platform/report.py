"""``python -m platform.report --experiment NAME --out DIR``: compare every run of an experiment.

``python -m platform.report --replay``: deliver to MLflow what runs kept in their storage path's
spool while the tracking server was down (``tracking.spool``; ``platform.train`` and
``platform.tune`` also do it when they start).

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
from platform.launch.cluster import default_storage_path, storage_uri
from platform.sweeps.spaces import knob_names
from platform.tracking.comparison import compare
from platform.tracking.spool import Spool, replay_all, spool_root
from platform.tracking.store import resolve_tracking_uri


def build_parser() -> argparse.ArgumentParser:
    parser = flags.ArgumentParser(prog="python -m platform.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", help="MLflow experiment name (required unless --replay)")
    parser.add_argument("--out", metavar="DIR", help="where to write report.md, report.csv and plots "
                                                    "(required unless --replay)")
    parser.add_argument("--tracking-uri", help=TRACKING_URI_HELP)
    parser.add_argument("--replay", action="store_true",
                        help="only deliver the records runs kept in --storage-path's spool during a tracking "
                             "outage, then exit")
    parser.add_argument("--storage-path", default=default_storage_path(),
                        help="with --replay: the runs' storage path (default: $NMT_STORAGE_PATH, else runs)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.replay:
        tracking_uri = resolve_tracking_uri(args.tracking_uri)
        replay_all(storage_uri(args.storage_path), tracking_uri)
        left = Spool(spool_root(storage_uri(args.storage_path)))
        return 1 if left.root.is_dir() and left.run_ids() else 0
    if not (args.experiment and args.out):
        parser.error("--experiment and --out are required (or give --replay)")
    knobs = knob_names() + ["d_model"]  # every built-in space's and recipe's knob, under its one name; the size
    compare(args.experiment, Path(args.out), knobs, args.tracking_uri)
    return 0


if __name__ == "__main__":
    run_cli(main)
