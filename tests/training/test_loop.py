"""Training as plain functions (no Ray): loss, checkpoints, DDP equivalence, the epoch loop."""

import os
import subprocess
import sys

import pytest
import sacrebleu
import torch

from conftest import ROOT
from platform.data.batching import BatchingConfig, ParquetExamples, ShardedBatches
from platform.errors import ConfigError
from platform.data import dataset as ds
from platform.data.dataset import PreparedDataset as Dataset
from platform.training.loop import LocalHooks, fit
from platform.training.metrics import detokenizer, translation_scores
from platform.training.config import resolve_config
from platform.training.checkpoint import checkpoint_state, load_checkpoint, restore, save_checkpoint
from platform.training.config import load_train_config
from platform.training.context import Context
from platform.training.step import build_training, inverse_sqrt_schedule, train_step

TINY = {"name": "dbsa", "num_encoder_layers": 2, "num_decoder_layers": 2, "d_model": 32, "num_heads": 4, "d_ff": 64,
        "dropout": 0.1, "p_enc": 1, "p_dec": 2}


def tiny_config(**extra):
    return load_train_config({"model": dict(TINY), "batching": {"max_tokens": 600}, "optim": {"warmup_steps": 5}, **extra})


def test_checkpoint_round_trip_gives_the_identical_next_step(demo_dataset, tmp_path):
    config = tiny_config()
    dataset = Dataset.open(demo_dataset)
    ctx = Context()

    def fresh():
        model, optimizer, scheduler = build_training(config, 1000, 1000, ctx)
        return model, optimizer, scheduler, ShardedBatches(dataset.train, config.batching)

    model, optimizer, scheduler, sampler = fresh()
    batches = iter(sampler)
    for _ in range(3):
        train_step(model, optimizer, scheduler, next(batches), config, ctx)
    state = checkpoint_state(model, optimizer, scheduler, sampler, config, {"epoch": 0, "step": 3, "history": []},
                             dataset.subword_bytes, dataset.meta)
    save_checkpoint(state, tmp_path / "checkpoint.pt")
    uninterrupted = train_step(model, optimizer, scheduler, next(batches), config, ctx).loss

    model2, optimizer2, scheduler2, sampler2 = fresh()
    restore(load_checkpoint(tmp_path / "checkpoint.pt"), model2, optimizer2, scheduler2, sampler2)
    resumed = train_step(model2, optimizer2, scheduler2, next(iter(sampler2)), config, ctx).loss
    assert resumed == pytest.approx(uninterrupted, abs=1e-6)
    assert not (tmp_path / ".checkpoint.pt.tmp").exists()


def test_checkpoint_loads_with_weights_only(demo_dataset, tmp_path):
    config = tiny_config()
    dataset = Dataset.open(demo_dataset)
    model, optimizer, scheduler = build_training(config, 1000, 1000, Context())
    sampler = ShardedBatches(dataset.train, config.batching)
    state = checkpoint_state(model, optimizer, scheduler, sampler, config, {"epoch": 1}, dataset.subword_bytes, dataset.meta)
    save_checkpoint(state, tmp_path / "c.pt")
    loaded = torch.load(tmp_path / "c.pt", weights_only=True)  # no arbitrary pickle needed
    assert loaded["config"].startswith("model:") and loaded["progress"] == {"epoch": 1}


def test_a_checkpoint_from_before_the_paper_fidelity_fixes_is_refused(demo_dataset):
    from platform.training.checkpoint import IncompatibleCheckpoint, config_from_checkpoint, model_from_checkpoint

    config = tiny_config()  # dbsa
    dataset = Dataset.open(demo_dataset)
    model, optimizer, scheduler = build_training(config, 1000, 1000, Context())
    sampler = ShardedBatches(dataset.train, config.batching)
    state = checkpoint_state(model, optimizer, scheduler, sampler, config, {"epoch": 1}, dataset.subword_bytes, dataset.meta)
    assert config_from_checkpoint(state).model.name == "dbsa"  # today's format loads
    state["format_version"] = 1
    with pytest.raises(IncompatibleCheckpoint, match="format 1 of a dbsa model predates the paper-fidelity fixes"):
        model_from_checkpoint(state)
    with pytest.raises(IncompatibleCheckpoint, match="predates"):
        restore(state, model, optimizer, scheduler, sampler)


def test_two_ddp_workers_update_exactly_like_one(demo_dataset, tmp_path):
    def launch(world):
        init = tmp_path / f"init-{world}"
        out = tmp_path / f"params-{world}.pt"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        processes = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "ddp_step.py"), str(demo_dataset), str(out),
                                       str(rank), str(world), str(init)], cwd=ROOT, env=env,
                                      stderr=subprocess.PIPE, text=True) for rank in range(world)]
        for process in processes:
            _, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, stderr
        return torch.load(out, weights_only=True)

    one, two = launch(1), launch(2)
    assert one.keys() == two.keys()
    initial = build_training(load_train_config({"model": {**TINY, "dropout": 0.0, "p_enc": 1}}), 1000, 1000, Context())[0]
    moved = 0
    for name, value in one.items():
        torch.testing.assert_close(two[name], value, atol=2e-6, rtol=1e-5)
        moved += not torch.equal(value, initial.state_dict()[name])
    assert moved > 10  # the updates really changed the parameters


def test_fit_runs_epochs_reports_metrics_and_resumes(demo_dataset, tmp_path):
    config = tiny_config(max_epochs=2, max_steps_per_epoch=3, eval={"max_sentences": 20})
    dataset = Dataset.open(demo_dataset)
    hooks = LocalHooks(tmp_path)
    lines = []
    history = fit(config, dataset, Context(), hooks, log=lines.append)
    assert [int(m["epoch"]) for m in history] == [1, 2]
    for key in ("train_loss", "dev_loss", "dev_bleu", "dev_chrf", "dev_bleu_tok", "dev_uas_enc", "dev_uas_dec", "tokens_per_s"):
        assert key in history[-1]
    assert lines[0].startswith("epoch 1/2  train_loss")
    assert (tmp_path / "last.pt").exists() and (tmp_path / "best.pt").exists()
    longer = tiny_config(max_epochs=3, max_steps_per_epoch=3, eval={"max_sentences": 20})
    resumed = fit(longer, dataset, Context(), LocalHooks(tmp_path), log=lines.append)
    assert [int(m["epoch"]) for m in resumed] == [1, 2, 3]  # epochs 1-2 restored, 3 trained
    assert any(line.startswith("resumed from epoch 2") for line in lines)


def test_early_stopping_stops_when_dev_bleu_does_not_improve(demo_dataset, tmp_path):
    config = tiny_config(max_epochs=6, max_steps_per_epoch=1, patience=1, eval={"max_sentences": 5},
                         optim={"lr": 1e-9, "warmup_steps": 0})
    history = fit(config, Dataset.open(demo_dataset), Context(), LocalHooks(tmp_path), log=lambda line: None)
    assert len(history) < 6


def test_nan_loss_fails_with_that_reason(demo_dataset):
    config = tiny_config(optim={"lr": 1e30, "warmup_steps": 0, "clip_norm": 0.0})
    dataset = Dataset.open(demo_dataset)
    model, optimizer, scheduler = build_training(config, 1000, 1000, Context())
    batches = iter(ShardedBatches(dataset.train, config.batching))
    with pytest.raises(FloatingPointError, match="loss became"):
        for _ in range(20):
            train_step(model, optimizer, scheduler, next(batches), config, Context())


def test_inverse_square_root_warmup():
    factor = inverse_sqrt_schedule(100)
    assert factor(50) == pytest.approx(0.5) and factor(100) == 1.0 and factor(400) == pytest.approx(0.5)


def test_resolved_train_config_is_strict(tmp_path):
    config = resolve_config("dbsa", "cpu", overrides=["model.p_enc=1", "optim.lr=5e-4"])
    assert config.model.p_enc == 1 and config.optim.lr == 5e-4 and config.model.d_model == 256
    with pytest.raises(ConfigError, match=r"unknown config key 'optim.learning_rate'; valid keys: .*lr"):
        resolve_config("dbsa", "cpu", overrides=["optim.learning_rate=1"])
    with pytest.raises(ConfigError, match="p_enc=9 is outside layers 1..3"):
        resolve_config("dbsa", "cpu", overrides=["model.p_enc=9"])
    with pytest.raises(ConfigError, match="model.gate: expected one of"):
        resolve_config("hier_tree_gru", "cpu", overrides=["model.gate=sometimes"])
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_model: 64\nmax_epochs: 3\n")
    config = resolve_config("transformer", "cpu", config_file=str(path))
    assert config.model.d_model == 64 and config.max_epochs == 3


def test_bleu_matches_sacrebleu_on_detokenized_text():
    hyps = ["it 's a pen .", "he was there ."]
    refs = ["it 's a pen .", "he is there ."]
    scores = translation_scores(hyps, refs, "en")
    direct = sacrebleu.corpus_bleu(["it's a pen.", "he was there."], [["it's a pen.", "he is there."]])
    assert scores.bleu == pytest.approx(direct.score)
    assert scores.bleu_tok == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score)
    assert detokenizer("ja")("これ は ペン です 。") == "これはペンです。"
    assert detokenizer("svo")("ze bla .") == "ze bla ."
