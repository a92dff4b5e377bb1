"""Checkpoints: an exact round trip, weights-only loading, refusing an outdated format."""

import pytest
import torch
from helpers import tiny_config

from platform.data.batching import ShardedBatches
from platform.data.dataset import PreparedDataset as Dataset
from platform.training.checkpoint import (
    CHECKPOINT_FORMAT,
    IncompatibleCheckpoint,
    checkpoint_state,
    load_checkpoint,
    restore,
    save_checkpoint,
)
from platform.training.context import Context
from platform.training.step import build_training, train_step


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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]  # no temp file left beside it


def test_checkpoint_loads_with_weights_only(demo_dataset, tmp_path):
    config = tiny_config()
    dataset = Dataset.open(demo_dataset)
    model, optimizer, scheduler = build_training(config, 1000, 1000, Context())
    sampler = ShardedBatches(dataset.train, config.batching)
    state = checkpoint_state(model, optimizer, scheduler, sampler, config, {"epoch": 1}, dataset.subword_bytes,
                             dataset.meta)
    save_checkpoint(state, tmp_path / "c.pt")
    loaded = torch.load(tmp_path / "c.pt", weights_only=True)  # no arbitrary pickle needed
    assert loaded["config"].startswith("model:") and loaded["progress"] == {"epoch": 1}


@pytest.mark.parametrize("version", [None, 1, 3, CHECKPOINT_FORMAT + 1])
def test_a_checkpoint_of_another_format_is_refused_in_one_line_naming_the_file(demo_dataset, tmp_path, version):
    """Formats before the first release are not converted: loading one says so."""
    config = tiny_config()
    dataset = Dataset.open(demo_dataset)
    model, optimizer, scheduler = build_training(config, 1000, 1000, Context())
    sampler = ShardedBatches(dataset.train, config.batching)
    state = checkpoint_state(model, optimizer, scheduler, sampler, config, {"epoch": 1}, dataset.subword_bytes,
                             dataset.meta)
    save_checkpoint(state, tmp_path / "today.pt")
    assert load_checkpoint(tmp_path / "today.pt")["format_version"] == CHECKPOINT_FORMAT
    if version is None:  # format 1 carried no version
        del state["format_version"]
    else:
        state["format_version"] = version
    save_checkpoint(state, tmp_path / "other.pt")
    with pytest.raises(IncompatibleCheckpoint) as refused:
        load_checkpoint(tmp_path / "other.pt")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'other.pt'}: the checkpoint (format {version or 1})")
    assert ("predates" if (version or 1) < CHECKPOINT_FORMAT else "is newer than") in message
