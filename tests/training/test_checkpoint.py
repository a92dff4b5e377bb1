"""Checkpoints: an exact round trip, weights-only loading, refusing an outdated format."""

import pytest
import torch
from helpers import tiny_config

from platform.data.batching import ShardedBatches
from platform.data.dataset import PreparedDataset as Dataset
from platform.training.checkpoint import checkpoint_state, load_checkpoint, restore, save_checkpoint
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


def test_a_tree_model_saved_before_the_papers_top_down_gru_loads_with_the_cell_it_was_trained_with():
    from platform import config as config_io
    from platform.training.checkpoint import config_from_checkpoint
    from platform.training.config import resolve_config

    data = config_io.to_dict(resolve_config("gumbel_tree", "smoke", recipe="currey2018/top-down"))
    del data["model"]["top_down_cell"]  # written before the field existed
    import yaml

    older = {"config": yaml.safe_dump(data), "format_version": 2}
    assert config_from_checkpoint(older).model.top_down_cell == "torch"  # its weights are nn.GRUCell's
    assert config_from_checkpoint({**older, "format_version": 3}).model.top_down_cell == "paper"
