"""The prepared dataset directory, and the one place that reads and writes it.

    DIR/train.parquet  dev.parquet  test.parquet   one row per sentence pair (DESIGN.md §3)
    DIR/src.model  tgt.model                        SentencePiece models (identical if joint)
    DIR/config.yaml                                 the resolved PrepareConfig
    DIR/meta.json                                   counts, vocab sizes, input hashes, command

Everything else (preparing, training, evaluation, diagnostics) goes through the functions
below.  A dataset is addressed by a local path or a URI (``s3://bucket/prefix``, ``gs://...``:
anything ``pyarrow.fs`` opens, through ``data.storage``); reads go to either, writes are local
(``prepare --out s3://...`` prepares locally, then ``storage.publish`` uploads it, its commit
marker last).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from platform import atomic
from platform.data import storage
from platform.data.batching import LIST_COLUMNS, TEXT_COLUMNS, ParquetExamples
from platform.errors import InputError, UserError

SPLITS = ("train", "dev", "test")
META_FILE = "meta.json"
CONFIG_FILE = "config.yaml"
FORMAT_VERSION = 2
# what changed in each version, for the error that refuses an older dataset
FORMAT_CHANGES = {2: "src_depth/tgt_depth are word-level depths (Omote et al.), not subword-tree depths"}

_ids = pa.list_(pa.int32())
SCHEMA = pa.schema(
    [
        ("src_ids", _ids),
        ("tgt_ids", _ids),
        ("src_heads", _ids),
        ("tgt_heads", _ids),
        ("src_word", _ids),
        ("tgt_word", _ids),
        ("src_depth", pa.list_(pa.int16())),
        ("tgt_depth", pa.list_(pa.int16())),
        ("src_tree_parent", _ids),
        ("src_text", pa.string()),
        ("tgt_text", pa.string()),
    ]
)


def subword_model_path(directory: str | Path, side: str) -> Path:
    return Path(directory) / f"{side}.model"


def split_path(directory: str | Path, split: str) -> Path:
    return Path(directory) / f"{split}.parquet"


def read_meta(directory: str | Path) -> dict[str, Any]:
    location = storage.locate(directory)
    path = location.child(META_FILE)
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise UserError(f"{location}: not a prepared dataset (no {META_FILE}); run python -m platform.prepare") from None
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: unreadable dataset metadata: {error}") from None
    if not storage.is_committed(location):
        raise UserError(f"{location}: an incomplete upload (no {storage.COMMITTED} marker); "
                        f"prepare it again with --overwrite")
    if meta.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{path}: dataset format {meta.get('format_version')!r}, this code reads {FORMAT_VERSION} "
                        f"({FORMAT_CHANGES[FORMAT_VERSION]}); prepare it again")
    return meta


def read_config_text(directory: str | Path) -> str:
    """The dataset's resolved PrepareConfig, as YAML text."""
    return storage.locate(directory).child(CONFIG_FILE).read_bytes().decode("utf-8")


def split_exists(directory: str | Path, split: str) -> bool:
    return storage.locate(directory).child(f"{split}.parquet").exists()


def read_examples(directory: str | Path, split: str) -> ParquetExamples:
    """One split of a prepared dataset, loaded for batching."""
    location = storage.locate(directory).child(f"{split}.parquet")
    try:
        table = pq.read_table(location.path, filesystem=location.fs, columns=list(LIST_COLUMNS + TEXT_COLUMNS))
    except FileNotFoundError:
        raise UserError(f"{location}: file not found") from None
    return ParquetExamples(table, name=location.uri)


def write_split(directory: str | Path, split: str, table: pa.Table, row_group_size: int = 4096) -> Path:
    path = split_path(directory, split)
    with atomic.naming(path):
        pq.write_table(table, path, row_group_size=row_group_size, compression="zstd")
    return path


def read_subword_model(directory: str | Path, side: str) -> bytes:
    location = storage.locate(directory).child(f"{side}.model")
    try:
        return location.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{location}: file not found") from None


def write_subword_model(directory: str | Path, side: str, blob: bytes) -> None:
    path = subword_model_path(directory, side)
    with atomic.naming(path):
        path.write_bytes(blob)


def write_meta(directory: str | Path, meta: dict[str, Any]) -> None:
    path = Path(directory) / META_FILE
    with atomic.naming(path):
        path.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read_meta_unchecked(directory: str | Path) -> dict[str, Any] | None:
    """The metadata as written, whatever its format (None if absent or unreadable)."""
    try:
        return json.loads(storage.locate(directory).child(META_FILE).read_bytes().decode("utf-8"))
    except (OSError, ValueError, UserError):
        return None


def write_dataset(out: str | Path, build, *, overwrite: bool = False, log=lambda message: None) -> str:
    """Make the dataset ``out`` with ``build(directory)``: a local ``out`` is built in place (the
    builder commits it atomically); a URI is checked before any work (it opens, it is free or
    ``overwrite``, something can be written there), built in a scratch directory, then
    published with its commit marker last.  Returns ``out`` as a location string."""
    import tempfile

    if not storage.is_uri(out):
        build(str(out))
        return storage.locate(out).uri
    target = storage.locate(out)  # a one-line error if it cannot be opened, before any work
    if target.occupied() and not overwrite:
        raise UserError(f"{target} already exists; pass --overwrite to replace it")
    storage.check_writable(target)
    with tempfile.TemporaryDirectory(prefix="nmt-prepare-") as scratch:
        local = Path(scratch) / "dataset"
        build(str(local))
        storage.publish(local, target.uri, overwrite=overwrite, log=log)
    return target.uri


def is_prepared(directory: str | Path) -> bool:
    """Whether ``directory`` holds a complete dataset of this format (any reason not: False)."""
    try:
        read_meta(directory)
    except (OSError, UserError):
        return False
    return True


DEMO_NAMES = {"demo": "small", "demo-large": "large"}  # --data names of the built-in corpus (data/demo.LEXICONS)


def resolve_dataset(data: str, quiet: bool = False) -> str:
    """A ``--data`` argument as a prepared dataset's location: ``demo`` (``demo-large``) → the
    built-in corpus, prepared once into ./data/demo (./data/demo-large); else a prepared
    dataset (a local directory, made absolute, or a URI) with train and dev splits (a clear
    error otherwise)."""
    if data in DEMO_NAMES:
        from platform.data.encode import prepare_default_demo

        return str(prepare_default_demo(quiet, lexicon=DEMO_NAMES[data]))
    location = storage.locate(data)
    read_meta(location.uri)  # a clear error if it is not a prepared dataset
    for split in ("train", "dev"):
        if not split_exists(location.uri, split):
            raise UserError(f"{location}: no {split}.parquet; training needs train and dev splits")
    return location.uri


@dataclass
class PreparedDataset:
    """A prepared dataset as training needs it: metadata, the train (and dev) examples, and the
    subword models' bytes (saved into every checkpoint)."""

    directory: str  # a local path or a URI
    meta: dict[str, Any]
    train: ParquetExamples
    dev: ParquetExamples | None
    subword_bytes: dict[str, bytes]

    @classmethod
    def open(cls, directory: str | Path, with_dev: bool = True) -> "PreparedDataset":
        directory = storage.locate(directory).uri
        meta = read_meta(directory)
        dev = read_examples(directory, "dev") if with_dev else None
        blobs = {side: read_subword_model(directory, side) for side in ("src", "tgt")}
        return cls(directory, meta, read_examples(directory, "train"), dev, blobs)


# ------------------------------------------------------------------ inputs (CoNLL-U, text)


def conllu_path(prefix: str | Path, lang: str) -> str:
    """``PREFIX.LANG.conllu`` or ``PREFIX.LANG.conllu.gz``, whichever exists (not both); a local
    path or a URI."""
    plain = storage.locate(f"{prefix}.{lang}.conllu")
    packed = storage.locate(f"{plain.uri}.gz")
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
            handle = gzip.GzipFile(fileobj=raw_handle) if name.endswith(".gz") else raw_handle
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
    digest = hashlib.sha256()
    with _open_binary(str(path)) as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _open_binary(name: str):
    if storage.is_uri(name):
        return io.BytesIO(storage.locate(name).read_bytes())
    return open(name, "rb")
