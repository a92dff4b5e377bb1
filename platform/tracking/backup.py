"""Backups of the tracking databases: ``pg_dump`` of a PostgreSQL database (custom format, what
``pg_restore`` reads), written to a local directory or an object store (``s3://``) as
``<database>-<UTC time>.dump`` (``mlflow-...``, ``optuna-...``), the newest ``keep`` of each
database kept.  ``ray_cluster.yaml``'s head runs ``python -m platform.backup`` every hour into
the bucket for MLflow's database and the sweeps' Optuna studies, so a terminated head loses at
most an hour of run metadata (its artifacts are on S3 already).

Restore into an empty database::

    pg_restore --no-owner -d postgresql://mlflow@127.0.0.1:5432/mlflow mlflow-20261126T101500000000Z.dump
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from platform import atomic
from platform.data import storage
from platform.errors import UserError
from platform.redaction import split_password

SUFFIX = ".dump"


def libpq_url(database_url: str) -> str:
    """A SQLAlchemy URL (``postgresql+psycopg://...``) as libpq reads it (``postgresql://...``)."""
    scheme, sep, rest = database_url.partition("://")
    if not sep or scheme.split("+")[0] not in ("postgresql", "postgres"):
        raise UserError(f"{scheme}://...: only a PostgreSQL database can be backed up (pg_dump)")
    return f"postgresql://{rest}"


def dump(database_url: str, pg_dump: str = "pg_dump", timeout: float = 3600.0) -> bytes:
    """The whole database in ``pg_dump``'s custom format.  A password in the URL reaches
    ``pg_dump`` in its environment (``PGPASSWORD``), not on its command line, which ``ps``
    shows to every user of the machine."""
    dbname, password = split_password(libpq_url(database_url))
    env = {**os.environ, **({"PGPASSWORD": password} if password else {})}
    try:
        result = subprocess.run([pg_dump, "--format=custom", "--no-owner", f"--dbname={dbname}"], env=env,
                                capture_output=True, timeout=timeout)
    except FileNotFoundError:
        raise UserError(f"{pg_dump}: not found (PostgreSQL's client programs; Debian: postgresql-client)") from None
    except subprocess.TimeoutExpired:  # a user error like the others: the backup loop says it and goes on
        raise UserError(f"pg_dump: no dump after {timeout:g} s") from None
    if result.returncode != 0:
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        raise UserError(f"pg_dump: {lines[-1] if lines else 'failed'}")
    return result.stdout


def prefix_of(database_url: str) -> str:
    """A backup's name starts with its database's name: ``mlflow-``, ``optuna-``."""
    from sqlalchemy.engine import make_url

    return f"{make_url(libpq_url(database_url)).database}-"


def backups(destination: str, prefix: str) -> list[storage.Location]:
    """The backups of one database (``prefix``) under ``destination``, oldest first (their
    names sort by time)."""
    from pyarrow.fs import FileSelector, FileType

    where = storage.locate(destination)
    if not where.exists():
        return []
    found = [info for info in where.fs.get_file_info(FileSelector(where.path))
             if info.type == FileType.File and info.base_name.startswith(prefix) and info.base_name.endswith(SUFFIX)
             and info.base_name[len(prefix):len(prefix) + 1].isdigit()]
    return [where.child(info.base_name) for info in sorted(found, key=lambda info: info.base_name)]


def backup(database_url: str, destination: str, keep: int = 24, pg_dump: str = "pg_dump") -> storage.Location:
    """Dump the database to ``destination`` (whole, or not at all), then delete all but the
    newest ``keep`` backups there; returns the new backup."""
    if keep < 1:
        raise UserError("--keep must be at least 1")
    data = dump(database_url, pg_dump)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"{time.time_ns() % 1_000_000_000 // 1000:06d}Z"
    prefix = prefix_of(database_url)
    target = storage.locate(destination).child(f"{prefix}{stamp}{SUFFIX}")
    if target.local:
        Path(target.path).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_file(target.path, lambda handle: handle.write(data))
    else:
        target.write_bytes(data)  # one PUT: an object store never shows half of it
    for old in backups(destination, prefix)[:-keep]:
        old.delete()
    return target
