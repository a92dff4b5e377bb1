"""evaluate / translate CLIs on checkpoints trained here (no Ray needed)."""

import gzip
import json
import subprocess
import sys

import pytest
from helpers import run_in_process, run_module, sacrebleu_scores

from platform.data.dataset import PreparedDataset as Dataset
from platform.training.config import load_train_config
from platform.training.context import Context
from platform.training.hooks import LocalHooks
from platform.training.loop import fit


@pytest.fixture
def cli(monkeypatch, capsys):
    """``cli(module, *args, stdin="")``: ``python -m MODULE ARGS`` as its ``__main__`` runs it
    (``run_cli``: exit status, one-line errors), in this process, as a CompletedProcess.  The CLIs
    as processes of their own: test_translate_needs_trees_for_tree_models_and_reads_conllu, the first
    evaluate of test_evaluate_checkpoint_on_demo_test_writes_files and the refused --average-last 3."""
    import importlib

    def run(module: str, *args, stdin: str = "") -> subprocess.CompletedProcess:
        return run_in_process(importlib.import_module(module).main, args, capsys, monkeypatch, stdin)

    return run


@pytest.fixture(scope="module")
def tree2seq_checkpoint(demo_dataset, tmp_path_factory):
    directory = tmp_path_factory.mktemp("tree2seq")
    config = load_train_config({"model": {"name": "tree2seq", "d_embed": 16, "d_hidden": 16}, "max_epochs": 1,
                                "max_steps_per_epoch": 2, "eval": {"max_sentences": 4}})
    fit(config, Dataset.open(demo_dataset), Context(), LocalHooks(directory, config), log=lambda line: None)
    return directory / "best.pt"


def test_translate_needs_trees_for_tree_models_and_reads_conllu(tree2seq_checkpoint, demo_dataset):
    plain = run_module("platform.translate", "--checkpoint", tree2seq_checkpoint, "--beam", "2")
    assert plain.returncode == 2 and "tree2seq reads source trees and its data recorded no segmenter" in plain.stderr
    conllu = gzip.open(demo_dataset / "conllu" / "test.sov.conllu.gz", "rt", encoding="utf-8").read()
    first_three = "\n\n".join(conllu.split("\n\n")[:3]) + "\n\n"
    from helpers import ROOT

    result = subprocess.run([sys.executable, "-m", "platform.translate", "--checkpoint", str(tree2seq_checkpoint),
                             "--conllu", "--beam", "2"], input=first_three, capture_output=True, text=True, cwd=ROOT,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.splitlines()) == 3
    broken = subprocess.run([sys.executable, "-m", "platform.translate", "--checkpoint", str(tree2seq_checkpoint),
                             "--conllu"], input="1\tx\tx\tX\t_\t_\t5\tdep\t_\t_\n\n", capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert broken.returncode == 2 and "<stdin>:1: HEAD 5 out of range" in broken.stderr


def test_evaluate_checkpoint_on_demo_test_writes_files(tree2seq_checkpoint, demo_dataset, tmp_path, cli):
    test = demo_dataset / "conllu" / "test"
    result = run_module("platform.evaluate", "--checkpoint", tree2seq_checkpoint, "--test", test,
                        "--src", "sov", "--tgt", "svo", "--beam", "1", "--out", tmp_path / "demo")
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"test_bleu"' in result.stdout
    assert len((tmp_path / "demo.hyp").read_text().splitlines()) == 100
    # the written sacrebleu commands reproduce every score (BLEU, chrF detokenized; BLEU tokenized)
    scores = json.loads(result.stdout)
    recomputed = sacrebleu_scores(tmp_path / "demo.sacrebleu.sh")
    assert recomputed == pytest.approx([scores["test_bleu"], scores["test_chrf"], scores["test_bleu_tok"]], abs=1e-3)
    assert "to recompute the scores" in result.stderr
    wrong = cli("platform.evaluate", "--checkpoint", tree2seq_checkpoint, "--test", test, "--src", "ja", "--tgt", "en")
    assert wrong.returncode == 2 and "translates sov->svo, not ja->en" in wrong.stderr
    missing = cli("platform.evaluate", "--checkpoint", tmp_path / "nope.pt", "--test", "x", "--src", "a", "--tgt", "b")
    assert missing.returncode == 2 and "checkpoint not found" in missing.stderr


def test_translate_nbest_writes_k_scored_translations_per_line_best_first(tree2seq_checkpoint, demo_dataset, cli):
    conllu = gzip.open(demo_dataset / "conllu" / "test.sov.conllu.gz", "rt", encoding="utf-8").read()
    first_two = "\n\n".join(conllu.split("\n\n")[:2]) + "\n\n"
    command = ["platform.translate", "--checkpoint", tree2seq_checkpoint, "--conllu"]
    result = cli(*command, "--beam", "4", "--nbest", "3", stdin=first_two)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split(" ||| ") for line in result.stdout.splitlines()]
    assert [int(row[0]) for row in rows] == [0, 0, 0, 1, 1, 1]
    for line in (0, 1):
        scores = [float(row[3]) for row in rows if int(row[0]) == line]
        assert scores == sorted(scores, reverse=True)  # best first
        assert all(row[2].startswith("log_prob=") and float(row[2][9:]) <= 0 for row in rows)
    best = cli(*command, "--beam", "4", stdin=first_two)
    assert best.stdout.splitlines() == [row[1] for row in rows if rows.index(row) % 3 == 0]  # 1-best = plain output
    refused = cli(*command, "--beam", "2", "--nbest", "3", stdin=first_two)
    assert refused.returncode == 2 and "--nbest 3 needs --beam ≥ 3" in refused.stderr and refused.stdout == ""


@pytest.fixture(scope="module")
def counted_in_updates(demo_dataset, tmp_path_factory):
    """A tree2seq trained 9 updates, counted in updates (epochs of 3), a checkpoint every 2 and a
    validation every 4 (checkpoints at 2, 4, 6, 8, 9), keeping the weights of its last 3."""
    directory = tmp_path_factory.mktemp("updates")
    config = load_train_config({"model": {"name": "tree2seq", "d_embed": 16, "d_hidden": 16}, "max_epochs": None,
                                "max_updates": 9, "save_every": 2, "validate_every": 4, "max_steps_per_epoch": 3,
                                "eval": {"max_sentences": 4}, "average_last": 3})
    fit(config, Dataset.open(demo_dataset), Context(), LocalHooks(directory, config), log=lambda line: None)
    return directory


def test_average_last_evaluates_the_mean_of_the_last_update_checkpoints(counted_in_updates, demo_dataset, tmp_path,
                                                                        cli):
    import torch

    from platform.inference import Trained
    from platform.training.averaging import kept_files, kept_weights
    from platform.training.retention import LAST

    kept = kept_files(counted_in_updates / LAST)
    assert [path.name for path in kept] == ["update_00000006.pt", "update_00000008.pt", "update_00000009.pt"]
    averaged = Trained.load(checkpoint=counted_in_updates / "best.pt", average_last=2).model.state_dict()
    last_two = [kept_weights(path) for path in kept[-2:]]
    moved = 0
    for name, value in averaged.items():
        torch.testing.assert_close(value, (last_two[0][name] + last_two[1][name]) / 2)
        moved += not torch.equal(last_two[0][name], last_two[1][name])
    assert moved > 3  # the two checkpoints really differ
    result = cli("platform.evaluate", "--checkpoint", counted_in_updates / "best.pt", "--test",
                 demo_dataset / "conllu" / "test", "--src", "sov", "--tgt", "svo", "--beam", "1",
                 "--average-last", "2", "--out", tmp_path / "avg")
    assert result.returncode == 0, result.stderr[-2000:]
    assert set(json.loads(result.stdout)) >= {"test_avg2_bleu", "test_avg2_chrf", "test_avg2_bleu_tok"}
    refused = run_module("platform.evaluate", "--checkpoint", counted_in_updates / "best.pt", "--test",
                         demo_dataset / "conllu" / "test", "--src", "sov", "--tgt", "svo", "--average-last", "4",
                         "--out", tmp_path / "refused")
    assert refused.returncode == 2 and "kept the weights of 3 checkpoint(s)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not list(tmp_path.glob("refused*"))


@pytest.fixture(scope="module")
def tanaka_pair(tanaka_dataset, tmp_path_factory):
    """Two small Transformers trained 40 updates each on the real Tanaka data, seeds 1 and 2."""
    checkpoints = []
    for seed in (1, 2):
        directory = tmp_path_factory.mktemp(f"tanaka-{seed}")
        model = {"name": "transformer", "d_model": 32, "d_ff": 64, "num_heads": 2, "num_encoder_layers": 1,
                 "num_decoder_layers": 1}
        config = load_train_config({"model": model, "seed": seed, "max_epochs": 1, "max_steps_per_epoch": 40,
                                    "batching": {"max_tokens": 1024}, "eval": {"max_sentences": 4}})
        fit(config, Dataset.open(tanaka_dataset), Context(), LocalHooks(directory, config), log=lambda line: None)
        checkpoints.append(directory / "best.pt")
    return checkpoints


def test_an_ensemble_of_two_runs_decodes_as_one_and_scores_otherwise_than_either(tanaka_pair, tanaka,
                                                                                 tree2seq_checkpoint, tmp_path, cli):
    """``evaluate --checkpoint A --checkpoint B`` on the Tanaka test set: the two models' next-token
    probabilities averaged at every step (models/ensemble.py) give other translations and scores
    than either model; an ensemble of one member scores as that member; a model trained on other
    data (another vocabulary) is refused in one line naming it."""
    def scores(*checkpoints, out):
        flags = [flag for path in checkpoints for flag in ("--checkpoint", str(path))]
        result = cli("platform.evaluate", *flags, "--test", tanaka / "test", "--src", "ja", "--tgt", "en",
                     "--beam", "2", "--out", tmp_path / out)
        assert result.returncode == 0, result.stderr[-2000:]
        return json.loads(result.stdout), (tmp_path / f"{out}.hyp").read_text()

    first, second = (scores(path, out=f"member{n}") for n, path in enumerate(tanaka_pair))
    both = scores(*tanaka_pair, out="ensemble")
    assert both[1] != first[1] and both[1] != second[1]  # other translations
    assert both[0]["test_bleu"] not in (first[0]["test_bleu"], second[0]["test_bleu"])
    assert both[0]["test_loss"] not in (first[0]["test_loss"], second[0]["test_loss"])
    from platform.inference import Trained

    alone = Trained.load_all(checkpoints=[tanaka_pair[0]])  # one: the model itself, no ensemble around it
    assert type(alone.model).__name__ != "Ensemble"
    refused = cli("platform.evaluate", "--checkpoint", tanaka_pair[0], "--checkpoint", tree2seq_checkpoint, "--test",
                  tanaka / "test", "--src", "ja", "--tgt", "en", "--out", tmp_path / "refused")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert f"{tree2seq_checkpoint} cannot join an ensemble with {tanaka_pair[0]}" in refused.stderr
    assert not list(tmp_path.glob("refused*"))
    translated = cli("platform.translate", "--checkpoint", tanaka_pair[0], "--checkpoint", tanaka_pair[1],
                     "--beam", "2", stdin="私 は 学生 です 。\n")
    assert translated.returncode == 0 and len(translated.stdout.splitlines()) == 1


def test_a_plain_text_test_set_is_translated_and_scored_against_several_references_in_one_command(
        tanaka_pair, tanaka, tmp_path, cli):
    """``evaluate --checkpoint C --test-text test.ja --ref test.en --ref other.en --metrics ...``:
    the raw source lines translated (segmented as the training data was: it came segmented) and
    scored by sacreBLEU against both references; the written script reproduces every score with
    sacreBLEU's own command line.  ``--metrics`` on a CoNLL-U ``--test`` adds chrF++ and TER."""
    other = tmp_path / "other.en"  # a second reference: each line's words in reverse order
    other.write_text("".join(" ".join(reversed(line.split())) + "\n"
                             for line in (tanaka / "test.en").read_text().splitlines()))
    result = cli("platform.evaluate", "--checkpoint", tanaka_pair[0], "--test-text", tanaka / "test.ja", "--ref",
                 tanaka / "test.en", "--ref", other, "--metrics", "bleu,chrf++,ter", "--beam", "2", "--out",
                 tmp_path / "text")
    assert result.returncode == 0, result.stderr[-2000:]
    scores = json.loads(result.stdout)
    assert set(scores) == {"test_bleu", "test_chrfpp", "test_ter"}
    assert len((tmp_path / "text.hyp").read_text().splitlines()) == 500
    assert sacrebleu_scores(tmp_path / "text.sacrebleu.sh") == pytest.approx(
        [scores["test_bleu"], scores["test_ter"], scores["test_chrfpp"]], abs=1e-3)
    single = cli("platform.evaluate", "--checkpoint", tanaka_pair[0], "--test-text", tanaka / "test.ja", "--ref",
                 tanaka / "test.en", "--metrics", "ter", "--beam", "2", "--out", tmp_path / "single")
    assert json.loads(single.stdout)["test_ter"] > scores["test_ter"]  # the second reference counted: fewer edits
    conllu = cli("platform.evaluate", "--checkpoint", tanaka_pair[0], "--test", tanaka / "test", "--src", "ja",
                 "--tgt", "en", "--metrics", "bleu,chrf,ter", "--beam", "2", "--out", tmp_path / "conllu")
    assert conllu.returncode == 0, conllu.stderr[-2000:]
    assert {"test_bleu", "test_chrf", "test_bleu_tok", "test_ter"} <= set(json.loads(conllu.stdout))
    short = tmp_path / "short.en"
    short.write_text("one line\n")
    refused = cli("platform.evaluate", "--checkpoint", tanaka_pair[0], "--test-text", tanaka / "test.ja", "--ref",
                  short, "--out", tmp_path / "refused")
    assert refused.returncode == 2 and "has 500 lines but" in refused.stderr and not list(tmp_path.glob("refused*"))


def test_a_checkpoint_loads_for_another_device_with_its_state_on_the_cpu(tree2seq_checkpoint):
    """On a GPU, ``--device cuda`` once mapped the whole checkpoint there and failed reading its
    subword models (numpy of a CUDA tensor).  ``meta`` stands in for that other device here:
    the checkpoint's state stays on the CPU, and only the model moves."""
    from platform.inference import Trained

    trained = Trained.load(checkpoint=tree2seq_checkpoint, device="meta")
    assert {p.device.type for p in trained.model.parameters()} == {"meta"}
    assert isinstance(trained.tgt_model.decode([5, 6]), str)
