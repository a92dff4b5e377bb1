"""When training stops by itself (early stopping on dev: ``patience``) and how a finished trial
is named from its last result (``trial_status``)."""

from __future__ import annotations

import torch

from platform.training.config import TrainConfig
from platform.training.context import Context

STOPPED_EARLY = "stopped_early"  # in the report with which early stopping (``patience``) ends training


def trial_status(last_result: dict | None, max_epochs: int, error: bool = False) -> str:
    """A finished trial as the summary, the console and the searcher name it, from its last
    result: ERROR; COMPLETE where it ran all ``max_epochs`` or stopped itself early (its
    ``patience``: ``STOPPED_EARLY`` in that report); else PRUNED (the scheduler or
    the time budget stopped it)."""
    if error:
        return "ERROR"
    result = last_result or {}
    done = int(result.get("training_iteration", 0)) >= max_epochs or bool(result.get(STOPPED_EARLY))
    return "COMPLETE" if done else "PRUNED"


def early_stopping_reason(config: TrainConfig) -> str:
    """Why a run that stopped early stopped, in the words of its progress line and MLflow tag."""
    return f"early stopping: no better {config.best_metric} for {config.patience} validations"


def update_best(progress: dict, metrics: dict[str, float], config: TrainConfig) -> bool:
    """Whether this validation has the best ``best_metric`` so far (rank 0, which has dev scores)."""
    score = metrics.get(config.best_metric)
    best = progress["best"]
    if score is not None and (best is None or (score > best if config.best_mode == "max" else score < best)):
        progress.update(best=float(score), best_step=progress["step"], best_epoch=int(metrics["epoch"]),
                        bad_validations=0)
        return True
    progress["bad_validations"] += 1
    return False


def should_stop(progress: dict, config: TrainConfig, ctx: Context) -> bool:
    """Rank 0 decides (only it has dev scores); every rank must agree, or DDP hangs."""
    local = float(config.patience is not None and progress["bad_validations"] >= config.patience and ctx.rank == 0)
    return bool(ctx.all_reduce(torch.tensor([local], device=ctx.device))[0] > 0)
