"""``python -m platform.prepare`` on the real Tanaka ja-en data: every row is a valid tree."""

import hashlib
import json
import subprocess

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import assert_full_binary_tree, run_in_process

from platform.data import dataset as ds
from platform.data.conllu import read_conllu
from platform.data.subwords import UNK_ID, SubwordModel
from platform.data.trees import word_spans

EXPECTED_COLUMNS = {
    "src_ids": "list<element: int32>", "tgt_ids": "list<element: int32>",
    "src_heads": "list<element: int32>", "tgt_heads": "list<element: int32>",
    "src_word": "list<element: int32>", "tgt_word": "list<element: int32>",
    "src_depth": "list<element: int16>", "tgt_depth": "list<element: int16>",
    "src_tree_parent": "list<element: int32>", "src_text": "string", "tgt_text": "string",
}


def test_columns_and_meta(tanaka_dataset, tanaka):
    for split in ds.SPLITS:
        schema = pq.read_schema(tanaka_dataset / f"{split}.parquet")
        assert {name: str(schema.field(name).type) for name in schema.names} == EXPECTED_COLUMNS
    meta = json.loads((tanaka_dataset / "meta.json").read_text())
    assert meta["splits"]["train"]["pairs_read"] == 50000
    assert meta["splits"]["train"]["pairs_written"] + meta["splits"]["train"]["dropped_too_long"] == 50000
    assert meta["splits"]["dev"]["pairs_written"] == meta["splits"]["test"]["pairs_written"] == 500
    assert meta["vocab_size"]["src"] <= 8000 and meta["vocab_size"]["tgt"] <= 8000
    train_ja = str((tanaka / "train.ja.conllu.gz").resolve())  # recorded resolved (../shared may be a link)
    assert meta["inputs_sha256"][train_ja] == hashlib.sha256((tanaka / "train.ja.conllu.gz").read_bytes()).hexdigest()
    assert meta["command"].split()[1:3] == ["-m", "platform.prepare"]
    assert (tanaka_dataset / "config.yaml").read_text().startswith("src_lang: ja\n")
    assert not list(tanaka_dataset.parent.glob(".*"))  # no temporary directory left behind


def prepare(capsys, *args) -> subprocess.CompletedProcess:
    """``python -m platform.prepare ARGS`` as its ``__main__`` runs it (``run_cli``: exit status,
    one-line errors), in this process; the session's ``tanaka_dataset`` is the CLI as a process."""
    from platform import prepare as cli

    return run_in_process(cli.main, args, capsys)


def check_side(row, side, word_heads, model, words, parents=None):
    ids, heads, word, depth = (np.asarray(row[f"{side}_{c}"]) for c in ("ids", "heads", "word", "depth"))
    n = len(ids)
    assert len(heads) == len(word) == len(depth) == n
    # one tree, one self-looping root
    roots = np.flatnonzero(heads == np.arange(n))
    assert len(roots) == 1
    assert depth[roots[0]] == 0
    for i in range(n):  # every subword reaches that root within n steps (no cycles)
        node, steps = i, 0
        while heads[node] != node and steps <= n:
            node, steps = heads[node], steps + 1
        assert node == roots[0]
    first, last = word_spans(word.tolist(), len(word_heads))
    # depths are word depths (Omote et al.): shared by a word's subwords, root word 0, a dependent
    # word one deeper than its head word, against the word-level tree of the CoNLL-U file
    assert np.all(depth == depth[np.asarray(first)[word]])
    for w, h in enumerate(word_heads):
        assert depth[first[w]] == (0 if h == -1 else depth[first[h]] + 1)
    # the DBSA subword rule, against the word-level tree of the CoNLL-U file
    for i in range(n):
        w = word[i]
        expected = i + 1 if i != last[w] else (i if word_heads[w] == -1 else first[word_heads[w]])
        assert heads[i] == expected
    # every word's subwords spell the word (characters unseen in training are <unk>)
    for w, form in enumerate(words):
        pieces = ids[first[w]:last[w] + 1].tolist()
        assert model.decode(pieces) == form or UNK_ID in pieces


@pytest.mark.parametrize("split", ["train", "dev"])
def test_every_row_is_a_valid_subword_tree(tanaka_dataset, tanaka, split):
    table = pq.read_table(tanaka_dataset / f"{split}.parquet").to_pylist()
    ja = read_conllu(tanaka / f"{split}.ja.conllu.gz")
    en = read_conllu(tanaka / f"{split}.en.conllu.gz")
    models = {side: SubwordModel.load(tanaka_dataset / f"{side}.model") for side in ("src", "tgt")}
    assert len(table) == len(ja)  # nothing dropped from Tanaka (sentences of 4-16 words)
    stride = 1 if split == "dev" else 7  # every 7th training row keeps the test quick
    for row, src, tgt in list(zip(table, ja, en))[::stride]:
        check_side(row, "src", src.heads, models["src"], src.words)
        check_side(row, "tgt", tgt.heads, models["tgt"], tgt.words)
        assert_full_binary_tree(row["src_tree_parent"], len(row["src_ids"]))
        assert row["src_text"] == src.text and row["tgt_text"] == tgt.text


def test_new_data_is_encoded_with_an_existing_datasets_subwords(tanaka_dataset, tanaka, tmp_path, capsys):
    out = tmp_path / "test-only"
    result = prepare(capsys, "--subwords-from", tanaka_dataset, "--test", tanaka / "test",
                        "--src", "ja", "--tgt", "en", "--out", out)
    assert result.returncode == 0, result.stderr
    assert pq.read_table(out / "test.parquet").equals(pq.read_table(tanaka_dataset / "test.parquet"))
    assert (out / "src.model").read_bytes() == (tanaka_dataset / "src.model").read_bytes()
    assert not (out / "train.parquet").exists()
    wrong = prepare(capsys, "--subwords-from", tanaka_dataset, "--test", tanaka / "test",
                       "--src", "en", "--tgt", "ja", "--out", tmp_path / "x")
    assert wrong.returncode == 2 and "is ja->en, not en->ja" in wrong.stderr


def test_max_len_drops_long_training_pairs_and_counts_them(tanaka, tmp_path, capsys):
    out = tmp_path / "short"
    result = prepare(capsys, "--train", tanaka / "dev", "--dev", tanaka / "test", "--src", "ja",
                        "--tgt", "en", "--out", out, "--max-len", "10", "--vocab-size", "1000")
    assert result.returncode == 0, result.stderr
    meta = json.loads((out / "meta.json").read_text())
    train = pq.read_table(out / "train.parquet")
    dropped = meta["splits"]["train"]["dropped_too_long"]
    assert 0 < dropped < 500 and train.num_rows == 500 - dropped
    pairs = zip(train.column("src_ids").to_pylist(), train.column("tgt_ids").to_pylist())
    lengths = [max(len(s), len(t)) for s, t in pairs]
    assert max(lengths) <= 10
    assert pq.read_table(out / "dev.parquet").num_rows == 500  # evaluation data is never filtered
    assert meta["splits"]["dev"]["over_max_len_kept"] > 0


def test_too_small_vocabulary_is_a_clear_error(tanaka, tmp_path, capsys):
    result = prepare(capsys, "--train", tanaka / "dev", "--dev", tanaka / "test", "--src", "ja",
                        "--tgt", "en", "--out", tmp_path / "tiny", "--vocab-size", "100")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "error: subword training failed: Vocabulary size is smaller than required_chars" in result.stderr
    assert not (tmp_path / "tiny").exists()
