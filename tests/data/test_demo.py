"""The synthetic demo corpus: deterministic, valid gold trees on both sides, really reordered."""

import gzip
import itertools
import json
import statistics

import pyarrow.parquet as pq
from helpers import run_in_process

from platform.data import demo
from platform.data.conllu import read_conllu

SMALL = demo.DemoConfig(num_train=300, num_dev=20, num_test=20, seed=7)


def kendall_tau(pair: demo.DemoPair) -> float | None:
    """Kendall's τ between the source and target order of the shared content words
    (1 = same order, -1 = reversed); None with fewer than two content words."""
    tgt_position = {t.concept: i for i, t in enumerate(pair.tgt) if t.concept >= 0}
    order = [tgt_position[t.concept] for t in pair.src if t.concept >= 0]
    if len(order) < 2:
        return None
    pairs = list(itertools.combinations(order, 2))
    concordant = sum(1 for a, b in pairs if a < b)
    return (2 * concordant - len(pairs)) / len(pairs)


def test_generator_is_deterministic(tmp_path):
    first = demo.write_corpus(tmp_path / "a", SMALL)
    second = demo.write_corpus(tmp_path / "b", SMALL)
    for split in ("train", "dev", "test"):
        for lang in (demo.SRC_LANG, demo.TGT_LANG):
            a = gzip.open(f"{first[split]}.{lang}.conllu.gz").read()
            b = gzip.open(f"{second[split]}.{lang}.conllu.gz").read()
            assert a == b and a
    other = list(demo.generate(demo.DemoConfig(seed=8), "train", 5))
    mine = list(demo.generate(SMALL, "train", 5))
    assert [t.form for t in other[0].src] != [t.form for t in mine[0].src]


def test_gold_trees_are_valid_on_both_sides(tmp_path):
    prefixes = demo.write_corpus(tmp_path, SMALL)
    for lang in (demo.SRC_LANG, demo.TGT_LANG):
        sentences = read_conllu(f"{prefixes['train']}.{lang}.conllu.gz")  # validates every tree
        assert len(sentences) == SMALL.num_train
        assert all(sum(h == -1 for h in s.heads) == 1 for s in sentences)


def test_target_order_really_differs_from_source_order():
    pairs = list(demo.generate(demo.DemoConfig(), "dev", 500))
    taus = [t for t in (kendall_tau(p) for p in pairs) if t is not None]
    # identical order would give 1.0 everywhere; head-final vs head-initial gives far less
    assert statistics.mean(taus) < 0.5
    assert sum(t < 1.0 for t in taus) / len(taus) > 0.9
    assert sum(t < 0.0 for t in taus) / len(taus) > 0.2  # many sentences are mostly reversed


def test_corpus_has_the_promised_phenomena():
    pairs = list(demo.generate(demo.DemoConfig(), "train", 2000))
    relations = [t.deprel for p in pairs for t in p.src]
    for relation in ("nsubj", "obj", "obl", "amod", "acl", "case", "det"):
        assert relation in relations
    # relative clauses nested inside relative clauses (depth 2) occur
    def rc_depth(token):
        depth, node = 0, token
        while node is not None:
            depth += node.deprel == "acl"
            node = node.head
        return depth

    assert max(rc_depth(t) for p in pairs for t in p.src) == 2
    stems = {t.lemma for p in pairs for t in p.src if t.upos == "VERB"}
    forms = {t.form for p in pairs for t in p.src if t.upos == "VERB"}
    assert len(stems) == demo.DemoConfig().num_verbs
    assert len(forms) > 2 * len(stems)  # inflection: several forms per stem
    lengths = [len(p.src) for p in pairs]
    assert 3 <= min(lengths) and statistics.mean(lengths) > 8


def prepare(capsys, *args):
    """``python -m platform.prepare ARGS`` as its ``__main__`` runs it, in this process (the CLI
    as a process of its own: tests/data/test_conllu.py)."""
    from platform import prepare as cli

    return run_in_process(cli.main, args, capsys)


def test_prepare_data_demo_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    result = prepare(capsys, "--data", "demo", "--out", out, "--demo-sizes", "400,30,30", "--seed", "3")
    assert result.returncode == 0, result.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert (meta["src_lang"], meta["tgt_lang"]) == ("sov", "svo")
    assert meta["demo"]["num_train"] == 400 and meta["demo"]["seed"] == 3
    assert pq.read_table(out / "train.parquet").num_rows == 400
    assert sorted(p.name for p in (out / "conllu").iterdir()) == sorted(
        f"{split}.{lang}.conllu.gz" for split in ("train", "dev", "test") for lang in ("sov", "svo"))
    assert "conllu/train.sov.conllu.gz" in meta["inputs_sha256"]


def test_preparing_the_same_demo_again_keeps_the_dataset(tmp_path, capsys):
    out = tmp_path / "demo"
    args = ("--data", "demo", "--out", out, "--demo-sizes", "200,20,20")
    assert prepare(capsys, *args).returncode == 0
    stamp = (out / "train.parquet").stat().st_mtime_ns
    again = prepare(capsys, *args)
    assert again.returncode == 0 and "keeping it" in again.stderr
    assert (out / "train.parquet").stat().st_mtime_ns == stamp
    other = prepare(capsys, *args[:-1], "300,20,20")  # other settings: refuse to clobber
    assert other.returncode == 2 and "already exists; pass --overwrite" in other.stderr


def test_demo_lexicon_presets_and_a_bad_value(tmp_path, capsys):
    out = tmp_path / "large"
    result = prepare(capsys, "--data", "demo", "--out", out, "--demo-sizes", "300,20,20",
                        "--demo-lexicon", "large", "--vocab-size", "400")
    assert result.returncode == 0, result.stderr
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    assert (meta["demo"]["num_nouns"], meta["demo"]["num_verbs"], meta["demo"]["num_adjectives"]) == (1600, 600, 400)
    bad = prepare(capsys, "--data", "demo", "--out", tmp_path / "bad", "--demo-lexicon", "many")
    assert bad.returncode == 2 and "--demo-lexicon expects small or large or NOUNS,VERBS,ADJECTIVES" in bad.stderr
    assert not (tmp_path / "bad").exists()
