"""Atomic writes: a crash or a kill leaves the old file (or directory) or the complete new one.

Everything the platform writes that a user keeps goes through here: checkpoints
(``write_file``), evaluation outputs (``write_texts``, all files or none) and prepared datasets
(``temporary_sibling`` + ``commit_directory``).  Data is fsynced before a rename points at it,
and the rename itself is made durable by syncing its directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO


def fsync_directory(directory: str | Path) -> None:
    """Make a rename in ``directory`` durable (best effort where directories cannot be opened)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """An OSError that does not say which file it is about (a ``write`` on a full disk says only
    "No space left on device") is raised again naming ``path``, so the CLI's one line does."""
    try:
        yield
    except OSError as error:
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror or str(error) or type(error).__name__, str(path)) from error


def write_file(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """``write(handle)`` into a temporary file beside ``path``, synced, then renamed to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with naming(path), open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())  # the bytes are on disk before the name points at them
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_directory(path.parent)
    return path


def write_texts(files: dict[Path, str]) -> list[Path]:
    """Write several UTF-8 text files, all or none: each is written aside first, then all renamed."""
    temporary = {Path(path): Path(path).with_name(f".{Path(path).name}.tmp") for path in files}
    try:
        for path, text in files.items():
            tmp = temporary[Path(path)]
            tmp.parent.mkdir(parents=True, exist_ok=True)
            with naming(path), open(tmp, "wb") as handle:
                handle.write(text.encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
        for path, tmp in temporary.items():
            os.replace(tmp, path)
    finally:
        for tmp in temporary.values():
            if tmp.is_file():  # never something else that happens to have the name
                tmp.unlink()
    for directory in {path.parent for path in temporary}:
        fsync_directory(directory)
    return list(temporary)


def temporary_sibling(out: Path) -> Path:
    """An empty hidden directory next to ``out`` (same filesystem) to build its replacement in."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    if tmp.exists():  # left by a killed run; never user data (hidden name owned by us)
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def commit_directory(tmp: Path, out: Path) -> None:
    """Move a finished temporary directory to ``out``, replacing an old one only at the end.

    The files are fsynced before the rename, so a crash leaves either the old directory or the
    complete new one under ``out`` (a crash between the two renames leaves the old one as
    ``.NAME.old``, which ``recover_directory`` puts back)."""
    for path in sorted(tmp.rglob("*")):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    fsync_directory(tmp)
    old = out.with_name(f".{out.name}.old")
    if out.exists():
        if old.exists():
            shutil.rmtree(old)
        out.rename(old)
    tmp.rename(out)
    fsync_directory(out.parent)
    if old.exists():  # renamed away first: a kill during the delete must not leave a ".old" to restore
        trash = out.with_name(f".{out.name}.trash-{os.getpid()}")
        old.rename(trash)
        shutil.rmtree(trash)


def recover_directory(out: Path) -> None:
    """Undo a commit killed between its two renames: the previous ``out`` comes back."""
    old = out.with_name(f".{out.name}.old")
    if old.is_dir() and not out.exists():
        old.rename(out)
        print(f"restored {out} from an interrupted replacement", file=sys.stderr)


def owned_scratch(prefix: str) -> Path:
    """A new temporary directory named after this process (``<prefix><pid>-<random>``), made after
    removing the ones of the same prefix whose process is gone: a SIGKILLed worker's (which no
    ``finally`` cleaned) would otherwise stay, a best checkpoint each, until a long sweep fills
    the disk."""
    import tempfile

    for stale in Path(tempfile.gettempdir()).glob(f"{prefix}*-*"):
        pid = stale.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
