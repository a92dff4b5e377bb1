"""data.storage: locations by URI, and publishing a dataset with its commit marker last."""

from __future__ import annotations

import json
import os

import pytest

from platform.data import dataset as ds
from platform.data import storage
from platform.data.builtin import resolve_dataset
from platform.errors import UserError


@pytest.mark.parametrize("uri, says", [("s3:///no-bucket/x", "Missing bucket name"),
                                       ("nope://host/x", "Unrecognized filesystem type")])
def test_a_location_that_cannot_be_opened_is_one_line_and_creates_nothing(uri, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=f"^{uri}: cannot open this location: .*{says}") as error:
        storage.locate(uri)
    assert "\n" not in str(error.value)
    assert list(tmp_path.iterdir()) == []  # never a local directory named after the URI


def test_local_paths_are_made_absolute_and_file_uris_are_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage.locate("data/x").uri == str(tmp_path / "data" / "x")
    assert storage.locate(f"file://{tmp_path}/y").local and not storage.is_uri(f"file://{tmp_path}/y")
    assert storage.is_uri("s3://bucket/prefix") and not storage.is_uri("runs")


def test_publish_copies_every_file_then_the_marker_and_refuses_to_replace_without_overwrite(demo_dataset, tmp_path):
    target = tmp_path / "copy"
    storage.publish(demo_dataset, target)
    marker = json.loads((target / storage.COMMITTED).read_text())
    digest, size = storage.directory_sha256(demo_dataset)
    files = [p for p in demo_dataset.rglob("*") if p.is_file()]
    assert marker == {"files": len(files), "bytes": size, "sha256": digest}
    assert ds.read_meta(target) == ds.read_meta(demo_dataset)
    assert (target / "conllu").is_dir()  # subdirectories too
    assert len(ds.read_examples(target, "train")) == len(ds.read_examples(demo_dataset, "train"))
    with pytest.raises(UserError, match="already exists; pass --overwrite"):
        storage.publish(demo_dataset, target)
    (target / "stale.txt").write_text("from before")
    storage.publish(demo_dataset, target, overwrite=True)
    assert not (target / "stale.txt").exists() and (target / storage.COMMITTED).is_file()


def test_the_storage_path_defaults_to_nmt_storage_path(monkeypatch):
    from platform import train, tune

    monkeypatch.setenv("NMT_STORAGE_PATH", "s3://bucket/syntax-nmt/ray")
    assert train.build_parser().parse_args(["--model", "dbsa"]).storage_path == "s3://bucket/syntax-nmt/ray"
    assert tune.build_parser().parse_args(["--space", "dbsa"]).storage_path == "s3://bucket/syntax-nmt/ray"
    monkeypatch.delenv("NMT_STORAGE_PATH")
    assert train.build_parser().parse_args(["--model", "dbsa"]).storage_path == "runs"


@pytest.fixture(scope="module")
def s3_server():
    """A real S3-compatible server (moto) on loopback, with the bucket ``data``."""
    from helpers import require_module
    from servers import MotoServer

    require_module("moto", "moto[server] (the dev extra) is the S3-compatible test server")
    server = MotoServer()
    server.start(dict(os.environ))
    server.create_bucket("data")
    yield server
    server.stop()


@pytest.fixture
def on_s3(s3_server, monkeypatch):
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server


def test_prepare_to_a_missing_bucket_fails_in_one_line_before_any_work(on_s3, tmp_path, monkeypatch):
    from platform import prepare

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"^s3://no-such-bucket/ds/\.write-probe-\w+: cannot write: .*bucket") as error:
        prepare.main(["--data", "demo", "--out", "s3://no-such-bucket/ds", "--quiet"])
    assert "\n" not in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_a_dataset_published_to_s3_reads_like_the_local_one_and_an_unfinished_one_is_refused(on_s3, demo_dataset):
    import pyarrow.fs

    storage.publish(demo_dataset, "s3://data/demo")
    assert ds.read_meta("s3://data/demo") == ds.read_meta(demo_dataset)
    assert ds.read_subword_model("s3://data/demo", "tgt") == ds.read_subword_model(demo_dataset, "tgt")
    assert resolve_dataset("s3://data/demo") == "s3://data/demo"
    lines = list(storage.open_text_lines(storage.conllu_path("s3://data/demo/conllu/test", "sov")))
    assert lines == list(storage.open_text_lines(storage.conllu_path(demo_dataset / "conllu" / "test", "sov")))
    with pytest.raises(UserError, match="already exists; pass --overwrite"):
        storage.publish(demo_dataset, "s3://data/demo")
    fs, path = pyarrow.fs.FileSystem.from_uri("s3://data/demo/COMMITTED")
    fs.delete_file(path)  # as if the upload had died before its last file
    with pytest.raises(UserError, match=r"^s3://data/demo: an incomplete upload \(no COMMITTED marker\)"):
        ds.read_meta("s3://data/demo")
    storage.publish(demo_dataset, "s3://data/demo", overwrite=True)
    assert ds.read_meta("s3://data/demo")["format_version"] == ds.FORMAT_VERSION


def test_a_uris_own_options_reach_every_file_of_the_dataset(s3_server, demo_dataset, monkeypatch):
    """``?endpoint_override=...`` instead of AWS_ENDPOINT_URL: kept for each file opened later
    (meta, Parquet splits, subword models), never shown in messages."""
    for key, value in s3_server.env().items():
        if key != "AWS_ENDPOINT_URL":
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    uri = f"s3://data/options?endpoint_override=127.0.0.1:{s3_server.port}&scheme=http&region=us-east-1"
    storage.publish(demo_dataset, uri)
    assert str(storage.locate(uri)) == "s3://data/options"
    assert resolve_dataset(uri) == uri  # what the workers are handed: still with its options
    assert ds.read_meta(uri) == ds.read_meta(demo_dataset)
    assert len(ds.read_examples(uri, "dev")) == len(ds.read_examples(demo_dataset, "dev"))
    assert ds.read_subword_model(uri, "src") == ds.read_subword_model(demo_dataset, "src")
    with pytest.raises(UserError, match=r"^s3://data/options already exists"):
        storage.publish(demo_dataset, uri)


def test_kept_weights_live_on_s3_as_in_a_directory(on_s3, tmp_path):
    import torch

    from platform.training.averaging import kept_files
    from platform.training.retention import LAST, KeptWeights

    kept = KeptWeights(storage.locate("s3://data/run/kept"), last=2, best=1)
    for step in (5, 10, 15):
        kept.keep(step, {"w": torch.full((1,), float(step))}, float(step) if step != 15 else None)
    assert kept.names(LAST) == ["update_00000010.pt", "update_00000015.pt"]  # the oldest deleted
    kept.forget_after(12)
    assert kept.names(LAST) == ["update_00000010.pt"]
    assert kept.names("best_checkpoints") == ["update_00000010_score_10.pt"]
    copies = kept.copy_to(tmp_path)
    assert copies[LAST] == kept_files(tmp_path / LAST) == [tmp_path / LAST / "update_00000010.pt"]
