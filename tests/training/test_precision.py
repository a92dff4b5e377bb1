"""Mixed precision by the device: the choice, and bf16 / fp16 (with loss scaling) training on
the CPU against float32 for a few updates, as far as a CPU can show it."""

import pytest
import torch
from helpers import tiny_config

from platform.data.batching import ShardedBatches
from platform.data.dataset import PreparedDataset
from platform.training.checkpoint import checkpoint_state, restore
from platform.training.context import Context, chosen_precision, precision_for
from platform.training.step import build_training, train_step


def test_auto_chooses_by_what_the_device_computes_in(monkeypatch):
    assert precision_for(torch.device("cpu")) == "fp32"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert precision_for(torch.device("cuda")) == "bf16"  # Ampere and later
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    assert precision_for(torch.device("cuda")) == "fp16"  # T4, V100
    assert chosen_precision("fp32", torch.device("cuda")) == "fp32"  # a setting forces it
    assert chosen_precision("auto", torch.device("cpu")) == "fp32"
    cpu = Context().with_precision("fp16")
    assert cpu.amp_dtype == torch.float16 and cpu.scaler is not None and cpu.scaler.is_enabled()
    assert Context().with_precision("bf16").scaler is None and Context().with_precision("auto").amp_dtype is None


def _losses(dataset, precision: str, updates: int = 6):
    config = tiny_config("transformer", precision=precision, model={"dropout": 0.0})
    ctx = Context().with_precision(config.precision)
    vocab = dataset.meta["vocab_size"]
    model, optimizer, scheduler = build_training(config, vocab["src"], vocab["tgt"], ctx)
    sampler = ShardedBatches(dataset.train, config.batching)
    losses = []
    for _, batches in zip(range(updates), sampler.updates()):
        losses.append(train_step(model, optimizer, scheduler, batches, config, ctx).loss)
    return losses, (model, optimizer, scheduler, sampler, config, ctx)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_as_float32_does_for_a_few_updates(demo_dataset, precision):
    """Same seed, same batches: each update's loss within 2 % of float32's; the loss falls."""
    dataset = PreparedDataset.open(demo_dataset, with_dev=False)
    exact, _ = _losses(dataset, "fp32")
    mixed, (model, *_, ctx) = _losses(dataset, precision)
    assert mixed != exact  # it did compute in lower precision
    assert all(abs(m - e) <= 0.02 * e for m, e in zip(mixed, exact)), (mixed, exact)
    assert mixed[-1] < mixed[0]
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the weights stay float32
    if precision == "fp16":
        assert ctx.scaler.get_scale() > 1.0  # loss scaling was on


def test_the_fp16_scale_is_saved_and_restored_with_the_checkpoint(demo_dataset):
    dataset = PreparedDataset.open(demo_dataset, with_dev=False)
    _, (model, optimizer, scheduler, sampler, config, ctx) = _losses(dataset, "fp16", updates=2)
    ctx.scaler.update(1234.0)
    state = checkpoint_state(model, optimizer, scheduler, sampler, config, {"epoch": 0, "step": 2, "history": []},
                             dataset.subword_bytes, dataset.meta, ctx.scaler)
    fresh = Context().with_precision("fp16")
    restore(state, model, optimizer, scheduler, sampler, fresh.scaler)
    assert fresh.scaler.get_scale() == 1234.0
