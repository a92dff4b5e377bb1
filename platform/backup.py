"""``python -m platform.backup``: back up the PostgreSQL databases of MLflow and the sweeps'
studies, and restore one.

    python -m platform.backup --database postgresql://mlflow@127.0.0.1:5432/mlflow --to s3://BUCKET/syntax-nmt/backups
    python -m platform.backup --database .../mlflow --database .../optuna --to backups/ --every 3600 --keep 48
    python -m platform.backup --restore latest --from s3://BUCKET/syntax-nmt/backups --database .../mlflow

Each backup is ``pg_dump``'s custom format, ``<database>-<UTC time>-<content digest>.dump``.  A
dump that holds what the newest backup holds is not written; of the rest, the newest ``--keep``,
the newest of each of the ``--keep-days`` earlier days and the largest are kept
(``platform.tracking.backup``).  ``--restore`` puts a backup (``latest``: the newest of the
database's name under ``--from``; or a file or ``s3://`` object) into an empty database, all of it
or nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from platform import flags
from platform.errors import UserError, run_cli
from platform.redaction import redact
from platform.tracking.backup import backup, backups, prefix_of, restore


def build_parser() -> argparse.ArgumentParser:
    parser = flags.ArgumentParser(prog="python -m platform.backup", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", required=True, action="append",
                        help="a database to back up (postgresql://...; repeatable), or to restore into")
    parser.add_argument("--to", metavar="DIR|URI", help="where the backups go (a directory or s3://...)")
    parser.add_argument("--keep", type=int, default=24, help="the newest backups kept (default 24)")
    parser.add_argument("--keep-days", type=int, default=30,
                        help="and the newest backup of each of this many earlier days (default 30)")
    parser.add_argument("--every", type=float, metavar="SECONDS", help="back up again every SECONDS, until stopped")
    parser.add_argument("--restore", metavar="BACKUP|latest",
                        help="restore this backup (a file, an s3:// object, or 'latest' under --from) into --database")
    parser.add_argument("--from", dest="source", metavar="DIR|URI", help="--restore latest: where the backups are")
    parser.add_argument("--pg-dump", default="pg_dump", help="the pg_dump program (default: the one on PATH)")
    parser.add_argument("--pg-restore", default="pg_restore",
                        help="the pg_restore program (default: the one on PATH; it reads each dump's content)")
    return parser


def restore_one(args: argparse.Namespace) -> int:
    if len(args.database) != 1 or args.to or args.every is not None:
        raise UserError("--restore takes one --database (the empty one to restore into) and no --to or --every")
    database, source = args.database[0], args.restore
    if source == "latest":
        if not args.source:
            raise UserError("--restore latest needs --from DIR|URI (where the backups are)")
        found = backups(args.source, prefix_of(database))
        if not found:
            raise UserError(f"{redact(args.source)}: no backup of {prefix_of(database)[:-1]} there")
        source = found[-1].location.uri
    restore(source, database, pg_restore=args.pg_restore)
    print(f"restored {redact(source)} into {redact(database)}", file=sys.stderr)
    return 0


def back_up_once(args: argparse.Namespace, database: str) -> str:
    made, new = backup(database, args.to, keep=args.keep, pg_dump=args.pg_dump, keep_days=args.keep_days,
                       pg_restore=args.pg_restore)
    return (f"backed up {redact(database)} to {made.location}" if new
            else f"{redact(database)} unchanged since {made.location}")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.restore is not None:
        return restore_one(args)
    if not args.to:
        raise UserError("--to is required (where the backups go)")
    if args.every is not None and args.every <= 0:
        raise UserError("--every must be positive")
    if args.every is None:
        for database in args.database:
            print(back_up_once(args, database), file=sys.stderr)
        return 0
    while True:  # a failed backup (the database or the bucket away for a moment) is said, and tried again
        for database in args.database:
            try:
                print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {back_up_once(args, database)}", file=sys.stderr,
                      flush=True)
            except UserError as error:
                print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} backup of {redact(database)} failed, next try in "
                      f"{args.every:g} s: {error}", file=sys.stderr, flush=True)
        time.sleep(args.every)


if __name__ == "__main__":
    run_cli(main)
