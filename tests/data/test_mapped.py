"""The train split memory-mapped from a node-local copy: the same batches as the split held in
memory, built once per node however many workers open it, compact, and refused when corrupt."""

import json
import multiprocessing
import os
import shlex
import time
from dataclasses import fields

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from platform.data import dataset as ds
from platform.data import mapped
from platform.data.batching import BatchingConfig, ShardedBatches
from platform.errors import UserError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(mapped.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def open_mapped(directory):
    return mapped.node_local_train(str(directory), ds.read_meta(directory))


def assert_same_batch(a, b):
    for field in fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y), field.name
    assert (a.rows is None) == (b.rows is None)
    if a.rows is not None:
        for name in ("tgt_in", "tgt_out"):
            assert torch.equal(getattr(a.rows, name), getattr(b.rows, name))
        for side in ("source", "target"):
            assert torch.equal(getattr(a.rows, side).sentence, getattr(b.rows, side).sentence)
            assert torch.equal(getattr(a.rows, side).position, getattr(b.rows, side).position)


@pytest.mark.parametrize("settings", [dict(max_tokens=700), dict(max_tokens=900, pack=True, bucket=8),
                                      dict(max_tokens=500, sort_by_length=False, max_length=30)])
def test_the_mapped_split_gives_exactly_the_batches_of_the_split_in_memory(demo_dataset, cache, settings):
    in_memory, on_disk = ds.read_examples(demo_dataset, "train"), open_mapped(demo_dataset)
    assert len(on_disk) == len(in_memory)
    for rank in (0, 1):
        a = ShardedBatches(in_memory, BatchingConfig(**settings), rank=rank, world_size=2)
        b = ShardedBatches(on_disk, BatchingConfig(**settings), rank=rank, world_size=2)
        for epoch in (0, 1):
            a.set_epoch(epoch), b.set_epoch(epoch)
            batches = list(zip(a, b, strict=True))
            assert batches
            for x, y in batches:
                assert_same_batch(x, y)


def test_the_copy_is_compact_and_holds_no_text(demo_dataset, cache):
    examples = open_mapped(demo_dataset)
    assert isinstance(examples.values["src_ids"].base, np.memmap)  # a plain array over the mapping
    assert examples.values["src_ids"].dtype == np.uint16 and examples.values["src_heads"].dtype == np.int16
    assert examples.offsets["src_ids"] is examples.offsets["src_depth"]  # a side's columns share their offsets
    assert not hasattr(examples, "texts")
    (copy,) = [p for p in cache.iterdir() if p.is_dir()]
    subwords = int(examples.offsets["src_ids"][-1] + examples.offsets["tgt_ids"][-1])
    size = sum(p.stat().st_size for p in copy.iterdir())
    assert size < 12 * subwords  # about 10 bytes per subword: no texts, 2-byte values
    assert size < os.path.getsize(demo_dataset / "train.parquet") * 3


def _open_in_child(directory, queue):
    queue.put("waiting")
    built = []
    examples = mapped.node_local_train(directory, ds.read_meta(directory), built.append)
    queue.put((str(examples.directory), len(built)))


def test_workers_on_a_node_build_the_copy_once_and_share_it(demo_dataset, cache):
    """Three workers open the dataset at once (held at the node's lock until all have asked):
    one builds the copy, the others map it."""
    import fcntl

    cache.mkdir()
    name = mapped.copy_name(ds.storage.locate(demo_dataset).child("train.parquet"), ds.read_meta(demo_dataset))
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    children = [context.Process(target=_open_in_child, args=(str(demo_dataset), queue)) for _ in range(3)]
    with open(cache / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for child in children:
            child.start()
        assert [queue.get(timeout=120) for _ in children] == ["waiting"] * 3
        time.sleep(1.0)  # each child is now at the lock
        fcntl.flock(lock, fcntl.LOCK_UN)
    results = [queue.get(timeout=120) for _ in children]
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    assert {directory for directory, _ in results} == {str(cache / name)}
    assert sorted(built for _, built in results) == [0, 0, 1]
    manifest = (cache / name / mapped.MANIFEST).stat()
    open_mapped(demo_dataset)  # a later worker maps the same copy
    assert (cache / name / mapped.MANIFEST).stat().st_mtime_ns == manifest.st_mtime_ns


def test_a_conversion_killed_midway_leaves_nothing_that_is_read(demo_dataset, cache, monkeypatch):
    calls = []

    def dies(*args):
        calls.append(args)
        raise KeyboardInterrupt

    monkeypatch.setattr(mapped, "_append", dies)
    with pytest.raises(KeyboardInterrupt):
        open_mapped(demo_dataset)
    assert calls and not [p for p in cache.iterdir() if p.is_dir()]
    monkeypatch.undo()
    assert len(open_mapped(demo_dataset)) == ds.read_meta(demo_dataset)["splits"]["train"]["pairs_written"]


def test_a_split_whose_columns_disagree_is_refused_naming_the_row(demo_dataset, cache, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(demo_dataset, broken)
    table = pq.read_table(broken / "train.parquet")
    heads = table.column("src_heads").to_pylist()
    heads[7] = heads[7][:-1]
    table = table.set_column(table.schema.get_field_index("src_heads"), "src_heads",
                             __import__("pyarrow").array(heads, type=table.schema.field("src_heads").type))
    pq.write_table(table, broken / "train.parquet")
    with pytest.raises(UserError, match="row 7: src_heads does not match"):
        open_mapped(broken)


def test_a_dataset_prepared_again_gets_a_new_copy(demo_dataset, cache, tmp_path):
    import shutil

    again = tmp_path / "again"
    shutil.copytree(demo_dataset, again)
    first = open_mapped(again).directory
    meta = json.loads((again / "meta.json").read_text())
    meta["seconds"] = meta["seconds"] + 1
    (again / "meta.json").write_text(json.dumps(meta))
    assert open_mapped(again).directory != first


def test_a_cache_directory_that_cannot_be_written_is_one_clear_error(demo_dataset, tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv(mapped.CACHE_ENV, str(blocked / "cache"))
    with pytest.raises(UserError, match=f"{blocked / 'cache'}: cannot keep this node's copy .* set NMT_DATA_CACHE"):
        open_mapped(demo_dataset)


def test_a_copy_a_crash_left_short_is_made_again(demo_dataset, cache):
    first = open_mapped(demo_dataset).directory
    (first / "src_ids.bin").write_bytes(b"")  # what a crash before the data reached the disk can leave
    again = open_mapped(demo_dataset)
    assert again.directory == first and len(again) == len(ds.read_examples(demo_dataset, "train"))
    assert again.values["src_ids"].nbytes == (first / "src_ids.bin").stat().st_size > 0


def test_an_unreadable_train_file_is_one_line_naming_it(demo_dataset, cache, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(demo_dataset, broken)
    data = bytearray((broken / "train.parquet").read_bytes())
    data[100:4000] = bytes(len(data[100:4000]))
    (broken / "train.parquet").write_bytes(bytes(data))
    with pytest.raises(UserError) as raised:
        open_mapped(broken)
    assert str(raised.value).startswith(f"{broken / 'train.parquet'}: cannot read: ") and "\n" not in str(raised.value)
    assert not [p for p in cache.iterdir() if p.is_dir()]


def test_a_copy_is_named_by_the_train_splits_content_and_a_short_one_is_set_aside_not_deleted(demo_dataset, cache):
    """Two train splits of one size and metadata but other content get other copies (``prepare``
    records the split's sha256); a copy found short is moved aside, so a process that maps its
    files (another host of a shared cache) keeps them, and a whole copy is made again."""
    meta = ds.read_meta(demo_dataset)
    source = ds.storage.locate(demo_dataset).child("train.parquet")
    assert meta["splits"]["train"]["sha256"] == ds.storage.input_sha256(source.uri)
    other = {**meta, "splits": {**meta["splits"], "train": {**meta["splits"]["train"], "sha256": "0" * 64}}}
    assert mapped.copy_name(source, other) != mapped.copy_name(source, meta)
    legacy = {**meta, "splits": {**meta["splits"], "train": {k: v for k, v in meta["splits"]["train"].items()
                                                             if k != "sha256"}}}
    assert mapped.copy_name(source, legacy) == mapped.copy_name(source, {**legacy, "splits": {
        **legacy["splits"], "train": {**legacy["splits"]["train"]}}})  # read from the file when not recorded
    first = open_mapped(demo_dataset)
    kept = open(next(first.directory.glob("*.bin")), "rb")  # a reader that holds a file of the copy
    (first.directory / mapped.MANIFEST).write_text("{}")  # found short now
    again = open_mapped(demo_dataset)
    assert again.directory == first.directory and (again.directory / mapped.MANIFEST).read_text() != "{}"
    aside = list(cache.glob(f".{first.directory.name}.stale-*"))
    assert len(aside) == 1 and kept.read(1) is not None
    kept.close()


def test_a_full_disk_is_the_environments_error_naming_the_copys_file_not_an_input_error(demo_dataset, tmp_path):
    """The node's cache on a real full disk (a 64 KiB tmpfs in a mount namespace of the test's
    own): one line naming the copy's file and the disk's error, not "cannot read" of the split."""
    import shutil
    import subprocess
    import sys

    from helpers import ROOT, fail_or_skip

    if shutil.which("unshare") is None or os.geteuid() != 0:
        fail_or_skip("needs root and unshare(1) for a tmpfs of its own")
    cache = tmp_path / "full"
    cache.mkdir()
    code = ("import sys; from platform.errors import run_cli; from platform.data import dataset as ds, mapped; "
            f"run_cli(lambda argv: mapped.node_local_train({str(demo_dataset)!r}, ds.read_meta({str(demo_dataset)!r}))"
            " and 0, [])")
    script = f"mount -t tmpfs -o size=64k tmpfs {cache} && exec {sys.executable} -c {shlex.quote(code)}"
    result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], cwd=ROOT,
                            env={**os.environ, mapped.CACHE_ENV: str(cache)}, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {cache}/.") and ".bin: cannot keep this node's copy" in line, line
    assert "No space left on device" in line and "cannot read" not in line, line
