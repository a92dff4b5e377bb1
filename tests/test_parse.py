"""``python -m platform.parse`` with the real ja_ginza pipeline, as a Ray job on the session's
cluster: one tree per line, the same bytes whatever the number of workers, a killed job resumed,
bad input refused before any work."""

import gzip
import shutil
import subprocess
import sys

import pytest
from helpers import ROOT, require_module, run_module, wait_for

from platform.data.conllu import read_conllu

BATCH, SHARD = 10, 20  # a shard is two nlp.pipe batches, as a whole-file nlp.pipe cuts them


def reference_parse(lines: list[str]) -> str:
    """The whole file through one ``nlp.pipe`` in this process: what the job's shards must add up to."""
    from platform.data.parsing import load_pipeline, one_tree_docs, segmenter_of, to_conllu

    nlp = load_pipeline("ja_ginza")
    docs = nlp.pipe(one_tree_docs(nlp, ["".join(line.split()) for line in lines], False), batch_size=BATCH)
    segmenter = segmenter_of(nlp.meta, True)
    return "".join(to_conllu(doc, str(number), line.strip(), segmenter if number == 1 else None)
                   for number, (line, doc) in enumerate(zip(lines, docs), 1))


def parse_args(source, out, cluster, workers: int = 1, shard_size: int = SHARD) -> list[str]:
    return ["--lang", "ja", "--in", str(source), "--out", str(out), "--batch-size", str(BATCH), "--shard-size",
            str(shard_size), "--workers", str(workers), "--address", cluster.get_runtime_context().gcs_address]


def dev_lines(tanaka, count: int, tmp_path):
    lines = (tanaka / "dev.ja").read_text(encoding="utf-8").splitlines()[:count]
    source = tmp_path / "dev.ja"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines, source


@pytest.mark.slow
def test_one_and_two_workers_write_the_bytes_of_a_one_process_parse(tanaka, tmp_path, ray_cluster):
    require_module("ja_ginza", "the [parse] extra is not installed")
    lines, source = dev_lines(tanaka, 60, tmp_path)
    outputs = []
    for workers, out in ((1, tmp_path / "one.conllu"), (2, tmp_path / "two.conllu.gz")):
        result = run_module("platform.parse", *parse_args(source, out, ray_cluster, workers))
        assert result.returncode == 0, result.stderr
        assert f"wrote 60 trees to {out} in " in result.stderr
        assert f"(3 shards, {workers} workers, 0 skipped)" in result.stderr
        assert not out.with_name(f"{out.name}.shards").exists()
        outputs.append(gzip.decompress(out.read_bytes()) if out.suffix == ".gz" else out.read_bytes())
    assert outputs[0] == outputs[1] == reference_parse(lines).encode("utf-8")
    sentences = read_conllu(tmp_path / "one.conllu")  # valid CoNLL-U, one root each (the reader checks)
    assert [sentence.sent_id for sentence in sentences] == [str(number) for number in range(1, 61)]
    for sentence, line in zip(sentences, lines):
        assert "".join(sentence.words) == "".join(line.split())  # GiNZA re-segmented the line
        assert sentence.text == line.strip()
        assert not any(rel.endswith("_bunsetu") for rel in sentence.deprels)


@pytest.mark.slow
def test_a_killed_parse_resumes_without_parsing_its_written_shards_again(tanaka, tmp_path, ray_cluster):
    require_module("ja_ginza", "the [parse] extra is not installed")
    lines, source = dev_lines(tanaka, 200, tmp_path)
    out, num_shards = tmp_path / "dev.conllu", 20
    shards = tmp_path / "dev.conllu.shards"
    args = parse_args(source, out, ray_cluster, shard_size=10)
    driver = subprocess.Popen([sys.executable, "-m", "platform.parse", *args], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: list(shards.glob("*.conllu")), timeout=240, what="the first shard", poll=0.02)
    finally:
        driver.kill()  # SIGKILL: the driver cleans up nothing
        driver.wait(timeout=30)
    kept = {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in shards.glob("*.conllu")}
    assert 1 <= len(kept) < num_shards and not out.exists()

    out.mkdir()  # the rerun parses the other shards, then cannot write OUT: the shards stay to be seen
    (out / "x").touch()
    result = run_module("platform.parse", *args)
    assert result.returncode == 1 and "Is a directory" in result.stderr, result.stderr
    assert f"resuming: {len(kept)} of {num_shards} shards were parsed already" in result.stderr
    written = {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in shards.glob("*.conllu")}
    assert len(written) == num_shards and {name: written[name] for name in kept} == kept

    shutil.rmtree(out)
    result = run_module("platform.parse", *args)
    assert result.returncode == 0, result.stderr
    assert f"({num_shards} shards, 0 workers, {num_shards} skipped)" in result.stderr
    assert out.read_text(encoding="utf-8") == reference_parse(lines) and not shards.exists()


@pytest.mark.slow
def test_a_line_of_two_sentences_stays_one_tree_and_crlf_reads_as_lf(tmp_path, ray_cluster):
    require_module("ja_ginza", "the [parse] extra is not installed")
    lines = ["自分の事をしろ。", "今日は晴れ。明日は雨。", "猫が好きです。"]
    source, out = tmp_path / "crlf.ja", tmp_path / "crlf.conllu"
    source.write_bytes("".join(f"{line}\r\n" for line in lines).encode("utf-8"))
    result = run_module("platform.parse", *parse_args(source, out, ray_cluster))
    assert result.returncode == 0, result.stderr
    assert out.read_text(encoding="utf-8") == reference_parse(lines)
    sentences = read_conllu(out)
    assert [sentence.text for sentence in sentences] == lines
    # the parser saw one sentence: one ROOT (a second one would have been reattached by to_conllu)
    assert [rel for rel in sentences[1].deprels if rel.upper() == "ROOT"] == ["ROOT"]


BAD_INPUTS = {  # name: (file contents, the error's place, its message)
    "empty line": ("今日は晴れ。\n\n明日は雨。\n".encode(), ":2", "empty line"),
    "whitespace-only line": ("今日は晴れ。\n明日は雨。\n\u3000 \t\n".encode(), ":3", "empty line"),
    "invalid UTF-8": ("今日は晴れ。\n".encode() + b"\xe6\x98\x8e\xff\n", ":2", "invalid UTF-8 (byte 4 of the line)"),
    "no line": (b"", "", "no sentences (empty input)"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_parse_input_fails_before_any_ray_work(tmp_path, name):
    content, place, message = BAD_INPUTS[name]
    source, out = tmp_path / "x.ja", tmp_path / "o.conllu"
    source.write_bytes(content)
    nowhere = "127.0.0.1:9"  # no cluster: a run that got as far as Ray would fail otherwise
    result = run_module("platform.parse", "--lang", "ja", "--in", source, "--out", out, "--address", nowhere,
                        timeout=60)
    assert result.returncode == 2 and f"error: {source}{place}: {message}" in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == [source]


def test_an_unknown_language_needs_a_pipeline(tmp_path):
    source = tmp_path / "x.ja"
    source.write_text("今日は晴れ。\n", encoding="utf-8")
    result = run_module("platform.parse", "--lang", "xx", "--in", source, "--out", tmp_path / "o.conllu")
    assert result.returncode == 2 and "no default spaCy pipeline for 'xx'" in result.stderr
    assert list(tmp_path.iterdir()) == [source]


def test_a_pipeline_retrained_in_place_keys_new_shards(tmp_path):
    """A shard written by a pipeline is not reused after that pipeline's files changed under the
    same name and version (retrained in place): the shard key holds the files' digest."""
    require_module("spacy", "the [parse] extra")
    from platform.launch.parse_job import ParseConfig, shard_key

    pipeline = tmp_path / "my_pipeline"
    (pipeline / "parser").mkdir(parents=True)
    (pipeline / "meta.json").write_text('{"lang": "ja", "name": "mine", "version": "1.0.0"}')
    (pipeline / "parser" / "model").write_bytes(b"weights 1")
    config = ParseConfig(source="in.txt", out=tmp_path / "out.conllu", model=str(pipeline), strip_spaces=True,
                         pretokenized=False)
    meta = {"lang": "ja", "name": "mine", "version": "1.0.0"}
    before = shard_key(config, meta)
    assert shard_key(config, meta) == before
    (pipeline / "parser" / "model").write_bytes(b"weights 2")  # retrained: same name, same version
    assert shard_key(config, meta) != before
