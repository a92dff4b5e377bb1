"""The epoch loop, as a plain function: ``fit(config, dataset, ctx, hooks)``.

``platform.launch.worker`` runs it in each Ray Train worker with Ray hooks (DDP wrapping,
reporting, checkpoints through Ray); tests run it directly with ``LocalHooks``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from platform.data.batching import ShardedBatches
from platform.data.dataset import PreparedDataset
from platform.data.subwords import SubwordModel
from platform.training.averaging import LAST_EPOCHS, keep_epoch
from platform.training.checkpoint import (
    CHECKPOINT_FILE,
    IncompatibleCheckpoint,
    checkpoint_state,
    load_checkpoint,
    restore,
    save_checkpoint,
)
from platform.training.config import TrainConfig
from platform.training.context import Context
from platform.training.evaluate import Evaluation, evaluate
from platform.training.metrics import SHOWN, shown
from platform.training.step import Diverged, Throughput, build_training, train_step


class Hooks:
    """What the surrounding system provides; the defaults run alone in one process."""

    def resume(self) -> dict | None:
        return None

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def report(self, metrics: dict[str, float], state: dict | None, evaluation: Evaluation | None, is_best: bool,
               final: bool = False) -> None:
        """An epoch's metrics (and, on rank 0, its checkpoint state); ``final``: the training's last
        epoch (its last one, or early stopping), so the end-of-run work belongs before it is reported."""

    def diverged(self, reason: str) -> None:
        """Training stops for good with ``reason`` (the loss became NaN/inf)."""

    def keep_weights(self, epoch: int, weights: dict, keep: int) -> None:
        """Rank 0, each epoch: the model weights for checkpoint averaging (the newest ``keep``)."""


@dataclass
class LocalHooks(Hooks):
    """Keeps checkpoints in a directory (``last.pt``, ``best.pt``) and the reported metrics."""

    directory: Path
    reported: list[dict[str, float]] = field(default_factory=list)

    def resume(self) -> dict | None:
        last = Path(self.directory) / "last.pt"
        return load_checkpoint(last) if last.exists() else None

    def keep_weights(self, epoch: int, weights: dict, keep: int) -> None:
        keep_epoch(Path(self.directory) / LAST_EPOCHS, epoch, weights, keep)

    def report(self, metrics, state, evaluation, is_best, final=False) -> None:
        self.reported.append(metrics)
        if state is not None:
            save_checkpoint(state, Path(self.directory) / "last.pt")
            if is_best:
                save_checkpoint(state, Path(self.directory) / "best.pt")


def fit(config: TrainConfig, dataset: PreparedDataset, ctx: Context, hooks: Hooks, log=print,
        started_at: float | None = None) -> list[dict[str, float]]:
    """Train for ``config.max_epochs`` (or until early stopping); returns the metric history.

    Every epoch's metrics say where its time went: ``steps_s`` (the update loop, batches
    included) and ``eval_s`` (dev decoding and scoring); with ``started_at`` (a ``time.time()``
    of the launch, e.g. the CLI's start), the first epoch of this process also has
    ``startup_s``, the seconds from the launch to the first update, and ``first_step_at``
    (its ``time.time()``)."""
    sampler = ShardedBatches(dataset.train, config.batching, rank=ctx.rank, world_size=ctx.world_size)
    vocab = dataset.meta["vocab_size"]
    model, optimizer, scheduler = build_training(config, vocab["src"], vocab["tgt"], ctx)
    progress = {"epoch": 0, "step": 0, "history": [], "best_bleu": -1.0, "best_epoch": 0, "bad_epochs": 0}
    state = hooks.resume()
    if state is not None:
        check_subwords(state, dataset)
        progress = restore(state, model, optimizer, scheduler, sampler)
        started_at = None  # a restart: its start-up is not the launch's
        log(f"resumed from epoch {progress['epoch']} (step {progress['step']})")
    trained = hooks.wrap(model)
    tgt_model = SubwordModel(dataset.subword_bytes["tgt"]) if ctx.rank == 0 else None
    for epoch in range(progress["epoch"], config.max_epochs):
        try:
            metrics = _train_epoch(trained, optimizer, scheduler, sampler, config, ctx, epoch, progress, hooks)
            if started_at is not None and "first_step_at" in metrics:
                metrics["startup_s"] = max(0.0, metrics["first_step_at"] - started_at)
                started_at = None
            else:
                metrics.pop("first_step_at", None)
        except Diverged as error:
            reason = f"diverged at epoch {epoch + 1}, step {progress['step'] + 1}: {error}"
            if ctx.rank == 0:
                log(reason)
                hooks.diverged(reason)
            raise Diverged(reason) from None
        evaluation = None
        if ctx.rank == 0 and dataset.dev is not None:
            began = time.perf_counter()
            evaluation = evaluate(model, dataset.dev, config, tgt_model, dataset.meta["tgt_lang"], ctx)
            metrics.update(evaluation.metrics)
            metrics["eval_s"] = time.perf_counter() - began
        is_best = _update_progress(progress, metrics, epoch)
        stop = _should_stop(progress, config, ctx)
        state = (checkpoint_state(model, optimizer, scheduler, sampler, config, progress, dataset.subword_bytes,
                                  dataset.meta) if ctx.rank == 0 else None)
        if ctx.rank == 0:
            log(progress_line(metrics, config.max_epochs))
            hooks.keep_weights(epoch + 1, state["model"], config.keep_last_epochs)
        hooks.report(metrics, state, evaluation, is_best, final=stop or epoch + 1 == config.max_epochs)
        if stop:
            if ctx.rank == 0:
                log(f"early stopping: no better dev_bleu for {config.patience} epochs")
            break
    return progress["history"]


def check_subwords(state: dict, dataset: PreparedDataset) -> None:
    """A checkpoint resumes only on data encoded with its own subword models."""
    for side, blob in dataset.subword_bytes.items():
        saved = state.get("subword_models", {}).get(side)
        if saved is not None and bytes(saved.numpy().tobytes()) != blob:
            raise IncompatibleCheckpoint(
                f"{dataset.directory} was prepared with other {side} subword models than the checkpoint to resume; "
                f"encode it with `platform.prepare --subwords-from` the checkpoint's dataset, or train under a new --name")


def _train_epoch(model, optimizer, scheduler, sampler, config, ctx, epoch, progress, hooks) -> dict[str, float]:
    """One epoch's updates and their metrics."""
    sampler.set_epoch(epoch)
    meter = Throughput()
    loss_sum, steps = 0.0, 0
    began, timing = time.perf_counter(), {}
    for index, batches in enumerate(sampler.updates()):
        if config.max_steps_per_epoch is not None and index >= config.max_steps_per_epoch:
            break
        if index == 0:
            timing["first_step_at"] = time.time()
        result = train_step(model, optimizer, scheduler, batches, config, ctx)
        loss_sum += result.loss
        steps += 1
        progress["step"] += 1
        meter.add(result.num_tokens)
    return {"epoch": epoch + 1, "train_loss": loss_sum / max(steps, 1), "tokens_per_s": meter.per_second,
            "tokens_per_update": meter.tokens / max(steps, 1), "update_freq": sampler.update_freq,
            "lr": scheduler.get_last_lr()[0], "step": progress["step"], "steps_s": time.perf_counter() - began, **timing}


def _update_progress(progress: dict, metrics: dict[str, float], epoch: int) -> bool:
    progress["epoch"] = epoch + 1
    progress["history"].append({k: float(v) for k, v in metrics.items()})
    bleu = metrics.get("dev_bleu")
    if bleu is not None and bleu > progress["best_bleu"]:
        progress["best_bleu"], progress["best_epoch"], progress["bad_epochs"] = float(bleu), epoch + 1, 0
        return True
    progress["bad_epochs"] += 1
    return False


def _should_stop(progress: dict, config: TrainConfig, ctx: Context) -> bool:
    """Rank 0 decides (only it has dev scores); every rank must agree, or DDP hangs."""
    local = float(config.patience is not None and progress["bad_epochs"] >= config.patience and ctx.rank == 0)
    return bool(ctx.all_reduce(torch.tensor([local], device=ctx.device))[0] > 0)


def progress_line(metrics: dict[str, float], max_epochs: int) -> str:
    """One epoch on the console: the metrics ``training.metrics.SHOWN`` marks for it."""
    parts = [f"epoch {int(metrics['epoch'])}/{max_epochs}"]
    parts += [f"{key} {SHOWN[key].format(metrics[key])}" for key in shown("progress") if key in metrics]
    return "  ".join(parts)


@contextmanager
def temp_checkpoint(state: dict) -> Iterator[Path]:
    """``state`` saved in a temporary directory for as long as the block runs (Ray copies it to
    the run's storage in ``ray.train.report``); removed after, so no epoch's copy stays behind."""
    with tempfile.TemporaryDirectory(prefix="nmt-ckpt-") as directory:
        save_checkpoint(state, Path(directory) / CHECKPOINT_FILE)
        yield Path(directory)

