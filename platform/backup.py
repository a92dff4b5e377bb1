"""``python -m platform.backup``: back up the PostgreSQL databases of MLflow and the sweeps' studies.

    python -m platform.backup --database postgresql://mlflow@127.0.0.1:5432/mlflow --to s3://BUCKET/syntax-nmt/backups
    python -m platform.backup --database .../mlflow --database .../optuna --to backups/ --every 3600 --keep 24

Each backup is ``pg_dump``'s custom format, ``<database>-<UTC time>.dump``; the newest ``--keep``
of each database are kept (``platform.tracking.backup``, which says how to restore one).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from platform.errors import UserError, run_cli
from platform.redaction import redact
from platform.tracking.backup import backup


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m platform.backup", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", required=True, action="append",
                        help="a database to back up (postgresql://...; repeatable)")
    parser.add_argument("--to", required=True, metavar="DIR|URI", help="where the backups go (a directory or s3://...)")
    parser.add_argument("--keep", type=int, default=24, help="the newest backups kept (default 24)")
    parser.add_argument("--every", type=float, metavar="SECONDS", help="back up again every SECONDS, until stopped")
    parser.add_argument("--pg-dump", default="pg_dump", help="the pg_dump program (default: the one on PATH)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.every is not None and args.every <= 0:
        raise UserError("--every must be positive")
    if args.every is None:
        for database in args.database:
            print(f"backed up {redact(database)} to {backup(database, args.to, args.keep, args.pg_dump)}",
                  file=sys.stderr)
        return 0
    while True:  # a failed backup (the database or the bucket away for a moment) is said, and tried again
        for database in args.database:
            try:
                made = backup(database, args.to, keep=args.keep, pg_dump=args.pg_dump)
                print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} backed up {redact(database)} to {made}",
                      file=sys.stderr, flush=True)
            except UserError as error:
                print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} backup of {redact(database)} failed, next try in "
                      f"{args.every:g} s: {error}", file=sys.stderr, flush=True)
        time.sleep(args.every)


if __name__ == "__main__":
    run_cli(main)
