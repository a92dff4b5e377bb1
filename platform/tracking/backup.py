"""Backups of the tracking databases: ``pg_dump`` of a PostgreSQL database (custom format, what
``pg_restore`` reads), written to a local directory or an object store (``s3://``) as
``<database>-<UTC time>-<content digest>.dump`` (``mlflow-...``, ``optuna-...``).
``ray_cluster.yaml``'s head runs ``python -m platform.backup`` every hour into the bucket for
MLflow's database and the sweeps' Optuna studies, so a terminated head loses at most an hour of
run metadata (its artifacts are on S3 already).

What is kept (``to_delete``): the newest ``keep``, the newest of each earlier day for
``keep_days`` days, and the largest; a dump whose content equals the newest backup's is not
written.  So a replaced head, dumping its new empty database every hour, rotates no good copy
out.  ``restore`` (``python -m platform.backup --restore``) puts a backup into an empty database.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from platform import atomic
from platform.data import storage
from platform.errors import UserError
from platform.redaction import redact, split_password

SUFFIX = ".dump"
DIGEST_LENGTH = 12


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
    dbname, env = _connection(database_url)
    return _run([pg_dump, "--format=custom", "--no-owner", f"--dbname={dbname}"], env, timeout, made="dump")


def prefix_of(database_url: str) -> str:
    """A backup's name starts with its database's name: ``mlflow-``, ``optuna-``."""
    from sqlalchemy.engine import make_url

    return f"{make_url(libpq_url(database_url)).database}-"


def content_digest(data: bytes, pg_restore: str = "pg_restore", timeout: float = 3600.0) -> str:
    """What the dump holds, as 12 hex digits: the SQL ``pg_restore`` makes of it, without its
    comments and the random ``\\restrict`` key newer releases add, so two dumps of an unchanged
    database have the same digest although their bytes differ (a custom-format dump records
    when it was made)."""
    sql = _run([pg_restore, "--file=-"], None, timeout, data)
    digest = hashlib.sha256()
    for line in sql.splitlines(keepends=True):
        if not line.startswith((b"--", b"\\restrict", b"\\unrestrict")):
            digest.update(line)
    return digest.hexdigest()[:DIGEST_LENGTH]


@dataclass(frozen=True)
class Backup:
    """One backup: ``<database>-<UTC time>-<content digest>.dump`` (the digest is absent in
    backups made before it was recorded), and its size in bytes."""

    location: storage.Location
    name: str
    size: int

    @property
    def stamp(self) -> str:
        return self.name.split("-")[-2 if self.digest else -1].removesuffix(SUFFIX)

    @property
    def day(self) -> str:
        return self.stamp[:8]

    @property
    def digest(self) -> str | None:
        last = self.name.removesuffix(SUFFIX).rsplit("-", 1)[-1]
        return last if len(last) == DIGEST_LENGTH and all(c in "0123456789abcdef" for c in last) else None


def backups(destination: str, prefix: str) -> list[Backup]:
    """The backups of one database (``prefix``) under ``destination``, oldest first (their
    names sort by time)."""
    from pyarrow.fs import FileSelector, FileType

    where = storage.locate(destination)
    if not where.exists():
        return []
    found = [info for info in where.fs.get_file_info(FileSelector(where.path))
             if info.type == FileType.File and info.base_name.startswith(prefix) and info.base_name.endswith(SUFFIX)
             and info.base_name[len(prefix):len(prefix) + 1].isdigit()]
    return [Backup(where.child(info.base_name), info.base_name, info.size)
            for info in sorted(found, key=lambda info: info.base_name)]


def to_delete(found: list[Backup], keep: int, keep_days: int) -> list[Backup]:
    """Which backups (oldest first) rotation removes: all but the newest ``keep``, the newest
    of each of the ``keep_days`` latest earlier days, and the largest backup.  The largest stays
    so that a run of small dumps (a new, empty database on a replaced head, dumped every hour)
    never rotates the last full copy out; unchanged dumps are not written at all (``backup``)."""
    kept = set(range(max(0, len(found) - keep), len(found)))
    newest_of_day: dict[str, int] = {}
    for index, made in enumerate(found):
        newest_of_day[made.day] = index
    earlier = [index for day, index in sorted(newest_of_day.items()) if index not in kept]
    kept.update(earlier[-keep_days:] if keep_days > 0 else [])
    if found:
        kept.add(max(range(len(found)), key=lambda index: (found[index].size, index)))
    return [made for index, made in enumerate(found) if index not in kept]


def backup(database_url: str, destination: str, keep: int = 24, pg_dump: str = "pg_dump", keep_days: int = 30,
           pg_restore: str = "pg_restore") -> tuple[Backup, bool]:
    """Dump the database to ``destination`` (whole, or not at all) unless the newest backup
    there holds the same content, then rotate (``to_delete``); returns the newest backup and
    whether it is new."""
    if keep < 1:
        raise UserError("--keep must be at least 1")
    data = dump(database_url, pg_dump)
    digest = content_digest(data, pg_restore)
    prefix = prefix_of(database_url)
    found = backups(destination, prefix)
    if found and found[-1].digest == digest:
        return found[-1], False
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"{time.time_ns() % 1_000_000_000 // 1000:06d}Z"
    name = f"{prefix}{stamp}-{digest}{SUFFIX}"
    target = storage.locate(destination).child(name)
    if target.local:
        Path(target.path).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_file(target.path, lambda handle: handle.write(data))
    else:
        target.write_bytes(data)  # one PUT: an object store never shows half of it
    made = Backup(target, name, len(data))
    for old in to_delete([*found, made], keep, keep_days):
        old.location.delete()
    return made, True


def restore(source: str, database_url: str, pg_restore: str = "pg_restore", psql: str = "psql",
            timeout: float = 3600.0) -> None:
    """Restore the backup at ``source`` (a file or ``s3://`` object) into ``database_url``, which
    must be empty (no tables): all of it in one transaction, or nothing."""
    dbname, env = _connection(database_url)
    tables = _run([psql, "--no-psqlrc", "-tAc", "select count(*) from pg_tables where schemaname = 'public'",
                   f"--dbname={dbname}"], env, timeout)
    if tables.strip() != b"0":
        raise UserError(f"{redact(database_url)}: not empty ({tables.decode().strip()} tables); "
                        f"restore into a new database (createdb)")
    data = storage.locate(source).read_bytes()
    _run([pg_restore, "--no-owner", "--single-transaction", "--exit-on-error", f"--dbname={dbname}"], env, timeout,
         data)


def _connection(database_url: str) -> tuple[str, dict[str, str]]:
    """The URL a PostgreSQL client program takes, without its password, and the environment that
    gives it the password (``PGPASSWORD``): off the command line, which ``ps`` shows."""
    dbname, password = split_password(libpq_url(database_url))
    return dbname, {**os.environ, **({"PGPASSWORD": password} if password else {})}


def _run(command: list[str], env: dict[str, str] | None, timeout: float, data: bytes | None = None,
         made: str = "result") -> bytes:
    """A PostgreSQL client program's output; its last line of error as a UserError (the backup
    loop says it and goes on)."""
    try:
        result = subprocess.run(command, input=data, env=env, capture_output=True, timeout=timeout)
    except FileNotFoundError:
        raise UserError(f"{command[0]}: not found (PostgreSQL's client programs; Debian: postgresql-client)") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"{Path(command[0]).name}: no {made} after {timeout:g} s") from None
    if result.returncode != 0:
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        raise UserError(f"{Path(command[0]).name}: {lines[-1] if lines else 'failed'}")
    return result.stdout
