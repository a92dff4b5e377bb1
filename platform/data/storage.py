"""Where dataset files live: a local path or any URI ``pyarrow.fs`` opens (``s3://``,
``gs://``, ``hdfs://``...).  ``data.dataset`` reads and writes through ``Location``; nothing else
opens dataset files.  Input files (CoNLL-U, plain text) are read through ``open_text_lines``.

Endpoints and credentials come from where pyarrow (the AWS SDK) looks for them:
``AWS_ENDPOINT_URL`` (MinIO, moto and other S3-compatible stores), the AWS credential chain
(environment, ``~/.aws``, an instance profile) and the URI's own options
(``s3://bucket/prefix?endpoint_override=...&region=...``).

Object stores have no atomic rename, so a dataset written to one (``publish``) gets its
``COMMITTED`` marker last: readers refuse a remote directory without it (an upload that died
midway), and ``--overwrite`` removes the marker before anything else.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from platform import atomic
from platform.errors import InputError, UserError

COMMITTED = "COMMITTED"  # written last by publish(): the directory is complete


def is_uri(location: str | Path) -> bool:
    """Whether ``location`` names a remote store (``scheme://``) rather than a local path."""
    text = str(location)
    return "://" in text and not text.startswith("file://")


@dataclass(frozen=True)
class Location:
    """A file or directory: its ``pyarrow.fs`` filesystem, its path there, and its URI as shown."""

    fs: object  # pyarrow.fs.FileSystem
    path: str
    uri: str  # with the URI's options (``?endpoint_override=...``), to open it again elsewhere

    @property
    def local(self) -> bool:
        from pyarrow.fs import LocalFileSystem

        return isinstance(self.fs, LocalFileSystem)

    def child(self, name: str) -> Location:
        base, mark, options = self.uri.partition("?")
        return Location(self.fs, f"{self.path.rstrip('/')}/{name}", f"{base.rstrip('/')}/{name}{mark}{options}")

    def __str__(self) -> str:
        """As shown in messages: without the URI's options (which may carry keys)."""
        return self.uri.partition("?")[0]

    def exists(self) -> bool:
        from pyarrow.fs import FileType

        return self._info().type != FileType.NotFound

    def is_dir(self) -> bool:
        from pyarrow.fs import FileType

        return self._info().type == FileType.Directory

    def occupied(self) -> bool:
        """A file, or a directory with something in it (object stores keep empty "directory"
        markers behind deleted files: those do not count)."""
        from pyarrow.fs import FileSelector, FileType

        kind = self._info().type
        if kind != FileType.Directory:
            return kind != FileType.NotFound
        try:
            return bool(self.fs.get_file_info(FileSelector(self.path, allow_not_found=True)))
        except OSError as error:
            raise UserError(f"{self}: cannot list: {first_line(error)}") from None

    def read_bytes(self) -> bytes:
        try:
            with self.fs.open_input_stream(self.path, compression=None) as stream:
                return stream.read()
        except FileNotFoundError:
            raise
        except OSError as error:
            if "not found" in str(error).lower() or "no such" in str(error).lower():
                raise FileNotFoundError(str(self)) from None
            raise UserError(f"{self}: cannot read: {first_line(error)}") from None

    def write_bytes(self, data: bytes) -> None:
        try:
            with self.fs.open_output_stream(self.path, compression=None) as stream:
                stream.write(data)
        except OSError as error:
            raise UserError(f"{self}: cannot write: {first_line(error)}") from None

    def write_bytes_atomically(self, data: bytes) -> None:
        """Write so that a reader sees the old file or the whole new one: a local file is
        written beside and renamed; an object store's single upload is atomic already."""
        if not self.local:
            self.write_bytes(data)
            return

        atomic.write_file(self.path, lambda handle: handle.write(data))

    def list_names(self) -> list[str]:
        """The names of the files directly under this directory (none where it does not exist)."""
        from pyarrow.fs import FileSelector, FileType

        try:
            found = self.fs.get_file_info(FileSelector(self.path, allow_not_found=True))
        except OSError as error:
            raise UserError(f"{self}: cannot list: {first_line(error)}") from None
        return [info.base_name for info in found if info.type == FileType.File]

    def delete(self) -> None:
        """Remove this file or directory tree (nothing if absent)."""
        try:
            if self.is_dir():
                self.fs.delete_dir(self.path)
            elif self.exists():
                self.fs.delete_file(self.path)
        except OSError as error:
            raise UserError(f"{self}: cannot delete: {first_line(error)}") from None

    def _info(self):
        try:
            return self.fs.get_file_info(self.path)
        except OSError as error:
            raise UserError(f"{self}: cannot open: {first_line(error)}") from None


def locate(location: str | Path) -> Location:
    """A ``--data``/``--out``/``--test`` argument as a ``Location``: local paths made absolute,
    URIs opened with ``pyarrow.fs`` — one that cannot be opened is a one-line error (never a
    local directory named after it)."""
    from pyarrow.fs import LocalFileSystem

    text = str(location)
    if not is_uri(text):
        path = Path(text[len("file://"):] if text.startswith("file://") else text).expanduser().resolve()
        return Location(LocalFileSystem(), str(path), str(path))
    base, mark, options = text.partition("?")
    try:
        fs, path = _open(text, _aws_settings())
    except (ValueError, OSError, TypeError) as error:  # ArrowInvalid is a ValueError
        raise UserError(f"{base}: cannot open this location: {first_line(error)}") from None
    return Location(fs, path.rstrip("/"), f"{base.rstrip('/')}{mark}{options}")


@functools.lru_cache(maxsize=64)
def _open(uri: str, settings: str):
    """``FileSystem.from_uri``, once per URI and AWS settings (``_aws_settings``) in a process:
    for s3 it asks AWS for the bucket's region unless the URI gives ``region=``."""
    from pyarrow.fs import FileSystem

    return FileSystem.from_uri(uri)


def _aws_settings() -> str:
    """A digest of the environment's ``AWS_*`` variables (endpoint, keys, region): another
    endpoint or key opens another filesystem, and the cache keeps no secret."""
    digest = hashlib.sha256()
    for key in sorted(name for name in os.environ if name.startswith("AWS_")):
        digest.update(f"{key}={os.getenv(key)}\0".encode())
    return digest.hexdigest()


def check_writable(directory: Location) -> None:
    """A one-line error now, before any work, if nothing can be written under ``directory``
    (a missing bucket, no credentials, a read-only mount)."""
    import uuid

    probe = directory.child(f".write-probe-{uuid.uuid4().hex[:12]}")
    probe.write_bytes(b"")
    probe.delete()


def is_committed(directory: Location) -> bool:
    """A remote dataset directory is complete; local ones are (they appear by an atomic rename)."""
    return directory.local or directory.child(COMMITTED).exists()


def publish(local_dir: str | Path, destination: str | Path, *, overwrite: bool = False,
            log=lambda message: None) -> Location:
    """Copy the complete directory ``local_dir`` to ``destination`` (local or remote), the
    ``COMMITTED`` marker last; an existing complete copy is refused unless ``overwrite``."""
    from pyarrow.fs import FileSelector, LocalFileSystem

    target = locate(destination)
    if target.occupied() and not overwrite:
        raise UserError(f"{target} already exists; pass --overwrite to replace it")
    if target.exists():
        target.child(COMMITTED).delete()  # readers see an incomplete dataset, never a mixed one
        target.delete()
    source = LocalFileSystem()
    files = [info for info in source.get_file_info(FileSelector(str(Path(local_dir).resolve()), recursive=True))
             if info.is_file]
    digest, total = hashlib.sha256(), 0
    try:
        target.fs.create_dir(target.path, recursive=True)
        for info in sorted(files, key=lambda i: i.path):
            relative = Path(info.path).relative_to(Path(local_dir).resolve()).as_posix()
            parent = Path(relative).parent.as_posix()
            if parent != ".":
                target.fs.create_dir(target.child(parent).path, recursive=True)
            destination = target.child(relative)
            with open(info.path, "rb") as source_file, \
                    destination.fs.open_output_stream(destination.path, compression=None) as out:
                file_digest = _copy_chunks(source_file, out.write)
            digest.update(relative.encode() + b"\0" + file_digest)
            total += info.size
    except OSError as error:
        raise UserError(f"{target}: cannot write: {first_line(error)}") from None
    marker = {"files": len(files), "bytes": total, "sha256": digest.hexdigest()}
    target.child(COMMITTED).write_bytes((json.dumps(marker) + "\n").encode())
    log(f"wrote {target}: {len(files)} files, {total / 1e6:.1f} MB")
    return target


def directory_sha256(local_dir: str | Path) -> tuple[str, int]:
    """The sha256 of a local directory's files (names and contents) and their total size."""
    root = Path(local_dir).resolve()
    digest, total = hashlib.sha256(), 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        with open(path, "rb") as handle:
            file_digest = _copy_chunks(handle, lambda chunk: None)
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + file_digest)
        total += path.stat().st_size
    return digest.hexdigest(), total


def _copy_chunks(source, write, chunk_size: int = 1 << 22) -> bytes:
    """``source`` passed to ``write`` a chunk at a time; returns its sha256 digest."""
    digest = hashlib.sha256()
    for chunk in iter(lambda: source.read(chunk_size), b""):
        digest.update(chunk)
        write(chunk)
    return digest.digest()


def first_line(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


# ------------------------------------------------------------------ input files (CoNLL-U, text)


def conllu_path(prefix: str | Path, lang: str) -> str:
    """``PREFIX.LANG.conllu`` or ``PREFIX.LANG.conllu.gz``, whichever exists (not both); a local
    path or a URI."""
    plain = locate(f"{prefix}.{lang}.conllu")
    packed = locate(f"{plain.uri}.gz")
    if plain.exists() and packed.exists():
        raise UserError(f"both {plain} and {packed} exist; remove one")
    if plain.exists():
        return plain.uri
    if packed.exists():
        return packed.uri
    raise UserError(f"{plain}[.gz]: file not found")


def open_text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` of a UTF-8 text file (local or a URI), gzip-compressed if
    it ends in .gz."""
    name = str(path)
    try:
        with _open_binary(name) as raw_handle:
            handle = gzip.GzipFile(fileobj=raw_handle) if name.partition("?")[0].endswith(".gz") else raw_handle
            for number, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise InputError(name, number, f"invalid UTF-8 (byte {error.start + 1} of the line)") from None
                if number == 1 and line.startswith("\ufeff"):
                    line = line[1:]
                yield number, line.rstrip("\r\n")
    except FileNotFoundError:
        raise InputError(name, None, "file not found") from None
    except (OSError, EOFError) as error:  # corrupt gzip, permission denied, a directory...
        raise InputError(name, None, f"cannot read: {error}") from None


def input_sha256(path: str | Path) -> str:
    """The sha256 of an input file (local or a URI), recorded in the dataset's metadata."""
    with _open_binary(str(path)) as handle:
        return _copy_chunks(handle, lambda chunk: None).hex()


def _open_binary(name: str):
    """A local file or a URI's object, read as a stream (never whole into memory)."""
    if is_uri(name):
        location = locate(name)
        try:
            stream = location.fs.open_input_stream(location.path, compression=None)
            return io.BufferedReader(_RawStream(stream), buffer_size=1 << 20)
        except FileNotFoundError:
            raise
        except OSError as error:
            if not location.exists():
                raise FileNotFoundError(name) from None
            raise InputError(name, None, f"cannot read: {first_line(error)}") from None
    return open(name, "rb")


class _RawStream(io.RawIOBase):
    """A ``pyarrow`` input stream as a raw binary file, so that it can be buffered and read by
    line (pyarrow's own streams have no ``readline``)."""

    def __init__(self, stream):
        self.stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self.stream.close()
        super().close()
