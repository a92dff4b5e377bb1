"""evaluate / translate CLIs on checkpoints trained here (no Ray needed)."""

import gzip
import json
import subprocess
import sys

import pytest

from conftest import run_module, sacrebleu_scores
from platform.data.dataset import PreparedDataset as Dataset
from platform.training.loop import LocalHooks, fit
from platform.training.config import load_train_config
from platform.training.context import Context


@pytest.fixture(scope="module")
def tree2seq_checkpoint(demo_dataset, tmp_path_factory):
    directory = tmp_path_factory.mktemp("tree2seq")
    config = load_train_config({"model": {"name": "tree2seq", "d_embed": 16, "d_hidden": 16}, "max_epochs": 1,
                                "max_steps_per_epoch": 2, "eval": {"max_sentences": 4}})
    fit(config, Dataset.open(demo_dataset), Context(), LocalHooks(directory), log=lambda line: None)
    return directory / "best.pt"


def test_translate_needs_trees_for_tree_models_and_reads_conllu(tree2seq_checkpoint, demo_dataset):
    plain = run_module("platform.translate", "--checkpoint", tree2seq_checkpoint, "--beam", "2")
    assert plain.returncode == 2 and "tree2seq reads source trees: give CoNLL-U on stdin with --conllu" in plain.stderr
    conllu = gzip.open(demo_dataset / "conllu" / "test.sov.conllu.gz", "rt", encoding="utf-8").read()
    first_three = "\n\n".join(conllu.split("\n\n")[:3]) + "\n\n"
    from conftest import ROOT

    result = subprocess.run([sys.executable, "-m", "platform.translate", "--checkpoint", str(tree2seq_checkpoint),
                             "--conllu", "--beam", "2"], input=first_three, capture_output=True, text=True, cwd=ROOT,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.splitlines()) == 3
    broken = subprocess.run([sys.executable, "-m", "platform.translate", "--checkpoint", str(tree2seq_checkpoint),
                             "--conllu"], input="1\tx\tx\tX\t_\t_\t5\tdep\t_\t_\n\n", capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert broken.returncode == 2 and "<stdin>:1: HEAD 5 out of range" in broken.stderr


def test_evaluate_checkpoint_on_demo_test_writes_files(tree2seq_checkpoint, demo_dataset, tmp_path):
    result = run_module("platform.evaluate", "--checkpoint", tree2seq_checkpoint, "--test", demo_dataset / "conllu" / "test",
                        "--src", "sov", "--tgt", "svo", "--beam", "1", "--out", tmp_path / "demo")
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"test_bleu"' in result.stdout
    assert len((tmp_path / "demo.hyp").read_text().splitlines()) == 100
    # the written sacrebleu commands reproduce every score (BLEU, chrF detokenized; BLEU tokenized)
    scores = json.loads(result.stdout)
    recomputed = sacrebleu_scores(tmp_path / "demo.sacrebleu.sh")
    assert recomputed == pytest.approx([scores["test_bleu"], scores["test_chrf"], scores["test_bleu_tok"]], abs=1e-3)
    assert "to recompute the scores" in result.stderr
    wrong = run_module("platform.evaluate", "--checkpoint", tree2seq_checkpoint, "--test", demo_dataset / "conllu" / "test",
                       "--src", "ja", "--tgt", "en")
    assert wrong.returncode == 2 and "translates sov->svo, not ja->en" in wrong.stderr
    missing = run_module("platform.evaluate", "--checkpoint", tmp_path / "nope.pt", "--test", "x", "--src", "a", "--tgt", "b")
    assert missing.returncode == 2 and "checkpoint not found" in missing.stderr


def test_translate_nbest_writes_k_scored_translations_per_line_best_first(tree2seq_checkpoint, demo_dataset):
    from conftest import ROOT

    conllu = gzip.open(demo_dataset / "conllu" / "test.sov.conllu.gz", "rt", encoding="utf-8").read()
    first_two = "\n\n".join(conllu.split("\n\n")[:2]) + "\n\n"
    command = [sys.executable, "-m", "platform.translate", "--checkpoint", str(tree2seq_checkpoint), "--conllu"]
    result = subprocess.run([*command, "--beam", "4", "--nbest", "3"], input=first_two, capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split(" ||| ") for line in result.stdout.splitlines()]
    assert [int(row[0]) for row in rows] == [0, 0, 0, 1, 1, 1]
    for line in (0, 1):
        scores = [float(row[3]) for row in rows if int(row[0]) == line]
        assert scores == sorted(scores, reverse=True)  # best first
        assert all(row[2].startswith("log_prob=") and float(row[2][9:]) <= 0 for row in rows)
    best = subprocess.run([*command, "--beam", "4"], input=first_two, capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert best.stdout.splitlines() == [row[1] for row in rows if rows.index(row) % 3 == 0]  # 1-best = plain output
    refused = subprocess.run([*command, "--beam", "2", "--nbest", "3"], input=first_two, capture_output=True, text=True,
                             cwd=ROOT, timeout=300)
    assert refused.returncode == 2 and "--nbest 3 needs --beam ≥ 3" in refused.stderr and refused.stdout == ""
