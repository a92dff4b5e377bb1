"""Checkpoints: what a run saves, atomic writes, safe loading, and restoring live objects.

A checkpoint holds plain types and tensors only, so it loads with
``torch.load(weights_only=True)``; it carries the resolved config, the subword models and the
dataset's prepare settings, so a checkpoint alone is enough to translate.  One of another
``format_version`` is refused when it is loaded: formats before the first release are not
converted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from models import build_model
from platform import atomic, config_io
from platform.data.batching import ShardedBatches
from platform.data.subwords import SubwordModel
from platform.errors import ConfigError
from platform.training.config import TrainConfig, load_train_config

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_FORMAT = 4  # what ``checkpoint_state`` writes: the only format this code loads


class IncompatibleCheckpoint(ConfigError):
    """A checkpoint of another format, or made with another model config or other subwords."""


def checkpoint_state(model: nn.Module, optimizer, scheduler, sampler: ShardedBatches, config: TrainConfig,
                     progress: dict[str, Any], subword_models: dict[str, bytes], dataset_meta: dict[str, Any],
                     scaler: torch.amp.GradScaler | None = None) -> dict:
    """Everything needed to continue or to use the model: plain types and tensors only, so it
    loads with ``torch.load(weights_only=True)``; with fp16, the gradient scaler's state."""
    module = model.module if hasattr(model, "module") else model
    return {
        **({"scaler": scaler.state_dict()} if scaler is not None else {}),
        "format_version": CHECKPOINT_FORMAT,
        "model": module.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "sampler": sampler.state_dict(),
        "config": config_io.dump_yaml(config),
        "progress": progress,
        "subword_models": {side: torch.frombuffer(bytearray(blob), dtype=torch.uint8)
                           for side, blob in subword_models.items()},
        "dataset_meta": {"src_lang": dataset_meta["src_lang"], "tgt_lang": dataset_meta["tgt_lang"],
                         "vocab_size": dataset_meta["vocab_size"], "config": dataset_meta["config"],
                         "segmentation": dataset_meta.get("segmentation", {})},  # older datasets: none recorded
        "rng": {"torch": torch.get_rng_state(), "numpy_seed": int(np.random.randint(0, 2 ** 31 - 1))},
    }


def save_checkpoint(state: dict, path: str | Path) -> Path:
    """Write atomically (a temporary file renamed), so a crash never leaves half a checkpoint."""
    return atomic.write_file(path, lambda handle: torch.save(state, handle))


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> dict:
    """Load with ``weights_only=True``: tensors and plain containers only, no arbitrary pickle.
    A checkpoint of another format is refused (``IncompatibleCheckpoint``)."""
    state = torch.load(Path(path), map_location=device, weights_only=True)
    check_format(state, path)
    return state


def check_format(state: dict, path: str | Path) -> None:
    """Refuse a checkpoint not written in ``CHECKPOINT_FORMAT`` (format 1 had no version)."""
    version = state.get("format_version", 1)
    if version != CHECKPOINT_FORMAT:
        when = "predates" if version < CHECKPOINT_FORMAT else "is newer than"
        raise IncompatibleCheckpoint(f"{path}: the checkpoint (format {version}) {when} the current format "
                                     f"({CHECKPOINT_FORMAT}); train it again with this version")


def config_from_checkpoint(state: dict) -> TrainConfig:
    return load_train_config(config_io.yaml_load(state["config"]))


def subword_models_from_checkpoint(state: dict) -> dict[str, SubwordModel]:
    return {side: SubwordModel(bytes(tensor.cpu().numpy().tobytes()))
            for side, tensor in state["subword_models"].items()}


def model_from_checkpoint(state: dict, device: torch.device | str = "cpu") -> tuple[nn.Module, TrainConfig]:
    config = config_from_checkpoint(state)
    vocab = state["dataset_meta"]["vocab_size"]
    model = build_model(config.model, vocab["src"], vocab["tgt"])
    load_weights(model, state["model"], "the checkpoint")
    return model.to(device).eval(), config


def load_weights(model: nn.Module, weights: dict[str, Tensor], what: str) -> None:
    """``load_state_dict`` with a one-line reason when the checkpoint was made by another config."""
    own = model.state_dict()
    missing = [key for key in own if key not in weights]
    unexpected = [key for key in weights if key not in own]
    shapes = [f"{key} {tuple(weights[key].shape)} vs {tuple(own[key].shape)}" for key in own
              if key in weights and weights[key].shape != own[key].shape]
    if missing or unexpected or shapes:
        detail = "; ".join(part for part in (
            f"missing {', '.join(missing[:3])}" if missing else "",
            f"unexpected {', '.join(unexpected[:3])}" if unexpected else "",
            f"shape {', '.join(shapes[:3])}" if shapes else "") if part)
        raise IncompatibleCheckpoint(f"{what} does not fit this model config ({detail})")
    model.load_state_dict(weights)


def restore(state: dict, model: nn.Module, optimizer, scheduler, sampler: ShardedBatches,
            scaler: torch.amp.GradScaler | None = None) -> dict[str, Any]:
    """Load a checkpoint into live objects; returns the saved progress."""
    module = model.module if hasattr(model, "module") else model
    load_weights(module, state["model"], "the checkpoint to resume")
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    sampler.load_state_dict(state["sampler"])
    if scaler is not None and "scaler" in state:  # else it starts at its initial scale
        scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng"]["torch"])
    np.random.seed(state["rng"]["numpy_seed"])
    return state["progress"]
