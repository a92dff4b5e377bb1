"""The prepared dataset directory, and the one place that reads and writes it.

    DIR/train.parquet  dev.parquet  test.parquet   one row per sentence pair (docs/architecture.md)
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

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from platform import atomic
from platform.data import storage
from platform.data.examples import Examples, ParquetExamples
from platform.data.mapped import node_local_train
from platform.data.tensors import LIST_COLUMNS, TEXT_COLUMNS
from platform.errors import UserError

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
        raise UserError(f"{location}: not a prepared dataset (no {META_FILE}); "
                        "run python -m platform.prepare") from None
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


def write_split(directory: str | Path, split: str, batches: Iterable[pa.RecordBatch]) -> Path:
    """A split's Parquet file from its record batches, one row group each, written as they come."""
    path = split_path(directory, split)
    with atomic.naming(path), pq.ParquetWriter(path, SCHEMA, compression="zstd") as writer:
        for batch in batches:
            writer.write_batch(batch)
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


@dataclass(frozen=True)
class DatasetRef:
    """A prepared dataset as one run refers to it, from the CLI to its workers: ``name`` as the
    user gave it, resolved (an absolute path or a URI: what MLflow records), and ``location``,
    where every worker reads it (``name`` itself, or its copy on the run's storage where other
    nodes cannot see ``name``)."""

    name: str
    location: str
    meta: dict[str, Any] | None = field(default=None, compare=False)  # its meta.json, read once by the driver


@dataclass
class PreparedDataset:
    """A prepared dataset as training needs it: metadata, the train examples (memory-mapped from
    this node's copy: ``data.mapped``), the dev examples (in memory) and the subword models'
    bytes (saved into every checkpoint)."""

    directory: str  # a local path or a URI
    meta: dict[str, Any]
    train: Examples
    dev: ParquetExamples | None
    subword_bytes: dict[str, bytes]

    @classmethod
    def open(cls, directory: str | Path, with_dev: bool = True, log=lambda message: None) -> PreparedDataset:

        directory = storage.locate(directory).uri
        meta = read_meta(directory)
        dev = read_examples(directory, "dev") if with_dev else None
        blobs = {side: read_subword_model(directory, side) for side in ("src", "tgt")}
        return cls(directory, meta, node_local_train(directory, meta, log), dev, blobs)
