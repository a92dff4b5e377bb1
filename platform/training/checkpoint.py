"""Checkpoints: what a run saves, atomic writes, safe loading, and restoring live objects.

A checkpoint holds plain types and tensors only, so it loads with
``torch.load(weights_only=True)``; it carries the resolved config, the subword models and the
dataset's prepare settings, so a checkpoint alone is enough to translate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from models import build_model
from platform import atomic
from platform import config as config_io
from platform.data.batching import ShardedBatches
from platform.data.subwords import SubwordModel
from platform.errors import ConfigError
from platform.training.config import TrainConfig, load_train_config

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_FORMAT = 3
# models whose computation changed with checkpoint format 2 (the paper-fidelity fixes: DBSA's
# scaled biaffine, Yang's single attention and β from h̃, Gumbel's attended leaves, word-level
# depths): their format-1 weights would now compute something else, so they are refused
CHANGED_IN_FORMAT_2 = ("dbsa", "deprel", "hier_tree_gru", "gumbel_tree")
# format 3: the tree models' top-down GRU is the papers' (models/tree.py ResetGRUCell); an older
# checkpoint of them loads with ``top_down_cell: torch``, the cell its weights belong to
TOP_DOWN_GRU_MODELS = ("hier_tree_gru", "gumbel_tree")


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
        "subword_models": {side: torch.frombuffer(bytearray(blob), dtype=torch.uint8) for side, blob in subword_models.items()},
        "dataset_meta": {"src_lang": dataset_meta["src_lang"], "tgt_lang": dataset_meta["tgt_lang"],
                         "vocab_size": dataset_meta["vocab_size"], "config": dataset_meta["config"]},
        "rng": {"torch": torch.get_rng_state(), "numpy_seed": int(np.random.randint(0, 2 ** 31 - 1))},
    }


def save_checkpoint(state: dict, path: str | Path) -> Path:
    """Write atomically (a temporary file renamed), so a crash never leaves half a checkpoint."""
    return atomic.write_file(path, lambda handle: torch.save(state, handle))


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> dict:
    """Load with ``weights_only=True``: tensors and plain containers only, no arbitrary pickle."""
    return torch.load(Path(path), map_location=device, weights_only=True)


def config_from_checkpoint(state: dict) -> TrainConfig:
    data = config_io.yaml_load(state["config"])
    version = state.get("format_version", 1)
    if version < 3 and data.get("model", {}).get("name") in TOP_DOWN_GRU_MODELS:  # its weights are nn.GRUCell's
        data["model"].setdefault("top_down_cell", "torch")
    config = load_train_config(data)
    if version < 2 and config.model.name in CHANGED_IN_FORMAT_2:
        raise IncompatibleCheckpoint(f"checkpoint format {version} of a {config.model.name} model predates the "
                                     "paper-fidelity fixes (docs/models.md), which change what its weights compute; "
                                     "train it again")
    return config


def subword_models_from_checkpoint(state: dict) -> dict[str, SubwordModel]:
    return {side: SubwordModel(bytes(tensor.cpu().numpy().tobytes())) for side, tensor in state["subword_models"].items()}


def model_from_checkpoint(state: dict, device: torch.device | str = "cpu") -> tuple[nn.Module, TrainConfig]:
    config = config_from_checkpoint(state)
    vocab = state["dataset_meta"]["vocab_size"]
    model = build_model(config.model, vocab["src"], vocab["tgt"])
    load_weights(model, state["model"], "the checkpoint")
    return model.to(device).eval(), config


class IncompatibleCheckpoint(ConfigError):
    pass


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
    config_from_checkpoint(state)  # refuses a checkpoint whose model now computes differently
    load_weights(module, state["model"], "the checkpoint to resume")
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    sampler.load_state_dict(state["sampler"])
    if scaler is not None and "scaler" in state:  # else it starts at its initial scale
        scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng"]["torch"])
    np.random.seed(state["rng"]["numpy_seed"])
    return state["progress"]
