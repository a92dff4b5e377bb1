"""The training step: DDP equivalence with one worker, NaN losses, the warm-up schedule."""

import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from platform.data.batching import ShardedBatches
from platform.data.dataset import PreparedDataset as Dataset
from platform.training.config import load_train_config
from platform.training.context import Context
from platform.training.step import build_training, inverse_sqrt_schedule, train_step

TINY = {"name": "dbsa", "num_encoder_layers": 2, "num_decoder_layers": 2, "d_model": 32, "num_heads": 4, "d_ff": 64,
        "dropout": 0.1, "p_enc": 1, "p_dec": 2}


def tiny_config(**extra):
    return load_train_config({"model": dict(TINY), "batching": {"max_tokens": 600}, "optim": {"warmup_steps": 5}, **extra})


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
