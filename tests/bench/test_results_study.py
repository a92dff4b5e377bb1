"""benchmarks/study.py's data and evaluation choices: its dataset goes through the dataset I/O
layer (a URI is prepared and published, never a local directory named after it), and the
Transformer rows are also scored on averaged weights, as Vaswani et al. evaluate."""

import os

import pytest
from helpers import benchmark_module

from platform.data import dataset as ds
from platform.data import storage


@pytest.fixture(scope="module")
def study():
    return benchmark_module("study")


@pytest.fixture(scope="module")
def s3_env():
    from helpers import require_module
    from servers import MotoServer

    require_module("moto", "moto[server] (the dev extra) is the S3-compatible test server")
    server = MotoServer()
    server.start(dict(os.environ))
    try:
        server.create_bucket("data")
        yield server.env()
    finally:
        server.stop()


def test_the_study_prepares_tanaka_straight_to_s3_once(study, tanaka, s3_env, tmp_path, monkeypatch):
    for key, value in s3_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    args = study.build_parser().parse_args(["--tanaka", str(tanaka), "--dataset", "s3://data/tanaka"])
    assert study.prepare(args) == "s3://data/tanaka"
    meta = ds.read_meta("s3://data/tanaka")
    assert (meta["src_lang"], meta["tgt_lang"]) == ("ja", "en") and ds.split_exists("s3://data/tanaka", "test")
    assert list(tmp_path.iterdir()) == []  # no local "s3:" directory
    marker = storage.locate("s3://data/tanaka").child(storage.COMMITTED)
    written = marker.fs.get_file_info(marker.path).mtime
    assert study.prepare(args) == "s3://data/tanaka"  # prepared once: the second call reads it
    assert marker.fs.get_file_info(marker.path).mtime == written


def test_transformer_rows_are_also_scored_on_their_last_epochs_averaged(study):
    assert study.averaged_window("deguchi2019/enc+dec", 10) == 5 and study.averaged_window("omote2019/rel", 3) == 3
    assert study.averaged_window("deguchi2019/baseline", 1) is None  # one epoch: nothing to average
    assert study.averaged_window("yang2017/gated", 10) is None
    assert study.averaged_window("currey2018/seq2seq", 10) is None
