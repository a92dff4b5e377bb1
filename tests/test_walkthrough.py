"""docs/walkthrough.md, run as written: every command of its ``bash`` blocks, in order, on a
1,000-pair slice of the Tanaka corpus (raw Japanese, tokenized English), and the output lines it
shows checked against what the commands print."""

import gzip
import importlib
import json
import re
import shlex

import pytest
from helpers import ROOT, require_module, run_in_process
from servers import ask_model_server

DOC = ROOT / "docs" / "walkthrough.md"
SIZES = {"train": 1000, "dev": 50, "test": 50}

pytestmark = pytest.mark.slow


def documented(kind: str) -> list[str]:
    """The lines of the page's ``kind`` blocks (``bash``: the commands; ``console``: what they print)."""
    return [line for block in re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
            for line in block.splitlines() if line.strip()]


def loose(shown: str) -> str:
    """A pattern of an output line the page shows: its hex ids and numbers stand for any."""
    pattern = re.escape(re.sub(r"\b[0-9a-f]{8,}\b", "\0", shown))
    pattern = re.sub(r"\d+(\\\.\d+)?", "\1", pattern)
    return pattern.replace("\0", "[0-9a-f]+").replace("\1", r"[\d.]+")


def write_corpus(tanaka, corpus) -> None:
    """The six files of the page's corpus: the Japanese raw (spaces removed), the English as given."""
    corpus.mkdir()
    for split, size in SIZES.items():
        for lang in ("ja", "en"):
            path = tanaka / (f"{split}.{lang}.gz" if split == "train" else f"{split}.{lang}")
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8") as handle:
                lines = [next(handle).rstrip("\n") for _ in range(size)]
            raw = [line.replace(" ", "") for line in lines] if lang == "ja" else lines
            (corpus / f"{split}.{lang}").write_text("".join(line + "\n" for line in raw), encoding="utf-8")


def english_trees(tanaka, corpus, split: str) -> None:
    """What ``platform.parse --lang en --spacy-model en_core_web_sm`` makes of the slice: the
    corpus's own trees of those sentences, by the same en_core_web_sm 3.8.0 (not on PyPI, so not
    installable here)."""
    with gzip.open(tanaka / f"{split}.en.conllu.gz", "rt", encoding="utf-8") as handle:
        blocks = handle.read().split("\n\n")[:SIZES[split]]
    (corpus / f"{split}.en.conllu").write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")


def test_the_walkthrough_runs_from_raw_text_to_a_served_translation(ray_cluster, tanaka, tmp_path, capsys,
                                                                     monkeypatch):
    require_module("ja_ginza", "the [parse] extra is not installed")
    monkeypatch.chdir(tmp_path)  # the page's working directory: corpus/, data/, runs/, mlflow.db
    write_corpus(tanaka, tmp_path / "corpus")
    printed, serve, body = [], None, None
    for line in documented("bash"):
        words = shlex.split(line)
        if words[:2] == ["python", "-m"] and words[2] == "platform.parse" and "en" == words[words.index("--lang") + 1]:
            english_trees(tanaka, tmp_path / "corpus", words[words.index("--in") + 1].split("/")[-1].split(".")[0])
        elif words[:2] == ["python", "-m"]:
            result = run_in_process(importlib.import_module(words[2]).main, words[3:], capsys, monkeypatch)
            assert result.returncode == 0, f"{line}\n{result.stderr[-3000:]}"
            printed += (result.stdout + result.stderr).splitlines()
        elif words[:3] == ["mlflow", "models", "serve"]:
            serve = words
        elif words[0] == "curl":
            body = words[words.index("-d") + 1]
        else:
            raise AssertionError(f"a command the test does not know how to run: {line}")
    (tmp_path / "printed.txt").write_text("\n".join(printed), encoding="utf-8")  # for a failure's reader
    for shown in documented("console"):  # every output line the page shows, ids and numbers aside
        assert any(re.search(loose(shown), line) for line in printed), f"not printed: {shown}"
    assert [(tmp_path / "corpus" / f"{split}.ja.conllu").read_text().count("\n\n") for split in SIZES] == [
        SIZES[split] for split in SIZES]
    assert serve is not None and body is not None
    predictions = ask_model_server(serve, json.loads(body), tmp_path, tmp_path / "serve.log",
                                   f"sqlite:///{tmp_path}/mlflow.db")
    assert len(predictions) == len(json.loads(body)["inputs"]) and all(isinstance(p, str) and p for p in predictions)
