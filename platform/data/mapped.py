"""The train split as every training worker reads it: memory-mapped from a node-local copy, so
a worker's private memory does not grow with the corpus.

The first worker on a node to open a dataset converts its ``train.parquet`` (local or a URI),
row group by row group, into flat uncompressed arrays under the node's cache directory
(``$NMT_DATA_CACHE``, default ``~/.cache/nmt-platform/train``); every later worker on the node,
of this run or any other, maps the same files, so the operating system's page cache holds one
copy per node however many workers and trials read it.  What a worker holds privately is
the batch plan (a few bytes per pair: ``data.batching``).

The copy keeps what training reads and nothing else:

- one int64 offsets array per side (``src``, ``tgt``; a side's ids, heads, word indices and
  depths have equal lengths, which the conversion checks) and one for the source tree, so no
  32-bit offset limit;
- each list column's values in the smallest type that holds them (ids in ``uint16`` where the
  vocabulary fits, positions and depths in ``int16`` where ``max_len`` allows);
- each side's lengths, from which the batch plan is made;
- no texts: the train split's texts are never read (dev and test stay in memory with theirs).

A copy is named by a hash of the dataset's metadata and its train split's content (the sha256
``prepare`` records), so a dataset prepared again gets a new one; it appears by an atomic rename
(synced first), built under a file lock by one worker while the node's others wait; a copy a
crash left short is moved aside (``.NAME.stale-...``, never deleted under a process that may map
it) and made again.  The
cache belongs on a node-local disk: a directory shared between hosts relies on their file
locks working across hosts.  Copies are not removed: delete the cache directory to
reclaim the disk (about 10 bytes per subword of the train split).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from platform import atomic
from platform.data import storage
from platform.data.examples import Examples
from platform.data.tensors import LIST_COLUMNS
from platform.errors import UserError
from platform.redaction import redact

CACHE_ENV = "NMT_DATA_CACHE"
FORMAT = 1
MANIFEST = "manifest.json"
# rows converted at a time (prepare's row group), read without Arrow's pre-buffering: the
# conversion's memory is bounded by this, not by the corpus (its peak private memory: 71 MB at 40k
# demo pairs, 77 MB at 320k; 143 MB and 220 MB at 40k and 160k with 65,536 rows and pre-buffering)
ROWS_PER_READ = 4096
# the columns whose rows share one offsets array; the source tree has 2n - 1 nodes for n subwords
GROUPS = {"src": ("src_ids", "src_heads", "src_word", "src_depth"),
          "tgt": ("tgt_ids", "tgt_heads", "tgt_word", "tgt_depth"),
          "tree": ("src_tree_parent",)}


def cache_root() -> Path:
    """Where this node keeps its converted train splits."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nmt-platform" / "train"


def node_local_train(directory: str, meta: dict[str, Any], log=lambda message: None) -> MappedExamples:
    """The train split of the prepared dataset ``directory`` (its ``meta``), memory-mapped from
    this node's copy, which is made first if the node has none."""
    source = storage.locate(directory).child("train.parquet")
    root = cache_root()
    target = root / copy_name(source, meta)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with _locked(root / f"{target.name}.lock"):
            if not _complete(target):
                _set_aside(target)  # a copy a crash left short: made again
                started = time.perf_counter()
                convert(source, target, dtypes_for(meta))
                size = sum(p.stat().st_size for p in target.iterdir())
                log(f"train split copied for memory mapping to {target} in {time.perf_counter() - started:.1f} s "
                    f"({size / 1e6:.1f} MB)")
    except OSError as error:  # not writable, disk full: the environment's error, naming the file
        raise UserError(f"{error.filename or root}: cannot keep this node's copy of the train split "
                        f"({error.strerror or error}); set {CACHE_ENV} to a writable directory with room") from None
    return MappedExamples(target, name=source.uri)


def _complete(target: Path) -> bool:
    """Whether ``target`` holds a whole copy: its manifest, and every array at its full size."""
    try:
        manifest = json.loads((target / MANIFEST).read_text())
        return all((target / f"{key}.bin").stat().st_size == np.dtype(dtype).itemsize * count
                   for key, (dtype, count) in manifest["arrays"].items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _set_aside(target: Path) -> None:
    """Move an incomplete copy out of the way rather than delete it: a process on another host of
    a shared cache directory may still map its files, and deleting them under it (NFS) would end
    it with SIGBUS; a renamed file stays readable to whoever has it open."""
    if target.exists():
        target.rename(target.with_name(f".{target.name}.stale-{socket.gethostname()}-{os.getpid()}-{time.time_ns()}"))


def copy_name(source: storage.Location, meta: dict[str, Any]) -> str:
    """A copy is named by the train split's content (the sha256 ``prepare`` records; read from the
    file for a dataset prepared before it did), its size, and the metadata its conversion depends on."""
    try:
        size = source.fs.get_file_info(source.path).size  # a file replaced beside its meta.json differs here
        if size is None:
            raise UserError(f"{source}: file not found")
        content = meta.get("splits", {}).get("train", {}).get("sha256") or storage.input_sha256(source.uri)
    except FileNotFoundError:
        raise UserError(f"{source}: file not found") from None
    except OSError as error:
        raise UserError(f"{source}: cannot read: {error}") from None
    identity = json.dumps({"format": FORMAT, "meta": meta, "train_sha256": content, "size": size}, sort_keys=True)
    return hashlib.sha256(identity.encode()).hexdigest()[:24]


def dtypes_for(meta: dict[str, Any]) -> dict[str, np.dtype]:
    """The smallest types that hold the split's values, from what the metadata bounds."""
    position = np.int16 if 2 * int(meta["config"]["max_len"]) < np.iinfo(np.int16).max else np.int32
    dtypes = {}
    for side in ("src", "tgt"):
        dtypes[f"{side}_ids"] = np.uint16 if meta["vocab_size"][side] <= 1 << 16 else np.int32
        dtypes.update({f"{side}_heads": position, f"{side}_word": position, f"{side}_depth": position,
                       f"{side}.lengths": position})
    dtypes["src_tree_parent"] = position
    return {name: np.dtype(dtype) for name, dtype in dtypes.items()}


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------- conversion


def convert(source: storage.Location, target: Path, dtypes: dict[str, np.dtype]) -> None:
    """Write ``source`` (a train.parquet) as the flat arrays of ``MappedExamples`` at ``target``,
    ``ROWS_PER_READ`` rows at a time; ``target`` appears only when complete."""
    host = socket.gethostname()
    for stale in target.parent.glob(f".{target.name}.tmp-{host}-*"):  # this host's, killed midway (we hold the lock)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = target.with_name(f".{target.name}.tmp-{host}-{os.getpid()}")
    tmp.mkdir()
    try:
        arrays = _Arrays(tmp, dtypes)
        rows = _convert_rows(source, arrays)
        pa.default_memory_pool().release_unused()  # the reader's buffers: Arrow's allocator keeps them otherwise
        arrays.close()
        manifest = json.dumps({"format": FORMAT, "rows": rows, "source": redact(str(source)),  # no credentials
                               "arrays": arrays.described()})
        with open(tmp / MANIFEST, "w") as handle:
            handle.write(manifest + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        atomic.fsync_directory(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not _complete(target):  # another host made it meanwhile (a cache shared without working locks)
                raise
            shutil.rmtree(tmp, ignore_errors=True)
        atomic.fsync_directory(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _convert_rows(source: storage.Location, arrays: _Arrays) -> int:
    """Every row of ``source`` appended to ``arrays``; a file that cannot be read is one line naming it."""
    rows = 0
    try:
        with source.fs.open_input_file(source.path) as handle:
            parquet = pq.ParquetFile(handle, pre_buffer=False)  # pre-buffering holds the file's row groups
            for batch in parquet.iter_batches(batch_size=ROWS_PER_READ, columns=list(LIST_COLUMNS)):
                _append(batch, arrays, str(source), rows)
                rows += batch.num_rows
    except (OSError, pa.ArrowInvalid) as error:
        if getattr(error, "filename", None) is not None:  # the copy's own file (disk full): said by the caller
            raise
        raise UserError(f"{source}: cannot read: {storage.first_line(error)}") from None
    return rows


def _append(batch: pa.RecordBatch, arrays: _Arrays, source: str, first_row: int) -> None:
    """One record batch's rows: each group's offsets once, each column's values, each side's lengths."""
    lengths = {}
    for group, columns in GROUPS.items():
        lengths[group] = pc.list_value_length(batch.column(columns[0])).to_numpy(zero_copy_only=False)
        for name in columns:
            own = pc.list_value_length(batch.column(name)).to_numpy(zero_copy_only=False)
            expected = 2 * lengths["src"] - 1 if group == "tree" else lengths[group]
            if not np.array_equal(own, expected):
                row = first_row + int(np.flatnonzero(own != expected)[0])
                raise UserError(f"{source}: row {row}: {name} does not match the sentence's length; prepare it again")
            arrays.append(name, batch.column(name).flatten().to_numpy(zero_copy_only=False), source)
        arrays.append_offsets(f"{group}.offsets", lengths[group])
    arrays.append("src.lengths", lengths["src"], source)
    arrays.append("tgt.lengths", lengths["tgt"], source)


class _Arrays:
    """The copy's files, appended to: values in their compact types, offsets as int64 running sums."""

    def __init__(self, directory: Path, dtypes: dict[str, np.dtype]):
        self.dtypes = {**dtypes, **{f"{group}.offsets": np.dtype(np.int64) for group in GROUPS}}
        self.paths = {name: directory / f"{name}.bin" for name in self.dtypes}
        self.handles = {name: open(path, "wb") for name, path in self.paths.items()}
        self.counts = dict.fromkeys(self.dtypes, 0)
        self.ends = {}
        for group in GROUPS:  # every offsets array starts at 0
            self._write(f"{group}.offsets", np.zeros(1, dtype=np.int64))
            self.ends[f"{group}.offsets"] = 0

    def append(self, name: str, values: np.ndarray, source: str) -> None:
        dtype = self.dtypes[name]
        limits = np.iinfo(dtype)
        if len(values) and (values.min() < limits.min or values.max() > limits.max):
            raise UserError(f"{source}: {name} holds values outside {dtype} ({values.min()}..{values.max()}), "
                            "beyond what the dataset's meta.json allows")
        self._write(name, values.astype(dtype, copy=False))

    def append_offsets(self, name: str, lengths: np.ndarray) -> None:
        offsets = self.ends[name] + np.cumsum(lengths, dtype=np.int64)
        if len(offsets):
            self.ends[name] = int(offsets[-1])
        self._write(name, offsets)

    def _write(self, name: str, values: np.ndarray) -> None:
        with atomic.naming(self.paths[name]):  # a full disk names the copy's file, not the split read
            self.handles[name].write(np.ascontiguousarray(values).tobytes())
        self.counts[name] += len(values)

    def close(self) -> None:
        for name, handle in self.handles.items():
            with atomic.naming(self.paths[name]):
                handle.flush()
                os.fsync(handle.fileno())
                handle.close()

    def described(self) -> dict[str, list]:
        return {name: [self.dtypes[name].name, self.counts[name]] for name in self.dtypes}


# ----------------------------------------------------------------------------- reading


class MappedExamples(Examples):
    """The arrays ``convert`` wrote, memory-mapped read-only (no texts)."""

    def __init__(self, directory: Path, name: str):
        self.name = name
        manifest = json.loads((directory / MANIFEST).read_text())
        arrays = {key: _map(directory / f"{key}.bin", dtype, count)
                  for key, (dtype, count) in manifest["arrays"].items()}
        self.values = {column: arrays[column] for column in LIST_COLUMNS}
        self.offsets = {column: arrays[f"{group}.offsets"] for group, columns in GROUPS.items() for column in columns}
        self.src_lengths, self.tgt_lengths = arrays["src.lengths"], arrays["tgt.lengths"]
        self.directory = directory


def _map(path: Path, dtype: str, count: int) -> np.ndarray:
    if count == 0:  # mmap cannot map an empty file
        return np.empty(0, dtype=dtype)
    # a plain ndarray over the mapping (no copy): slicing a memmap subclass costs twice as much
    return np.asarray(np.memmap(path, dtype=dtype, mode="r", shape=(count,)))
