"""What training prints: a line per validation and one every ``log_every`` updates."""

from __future__ import annotations

from platform.training.config import TrainConfig
from platform.training.metrics import SHOWN, shown


def progress_line(metrics: dict[str, float], config: TrainConfig) -> str:
    """One validation on the console: the metrics ``training.metrics.SHOWN`` marks for it."""
    limit = f"/{config.max_epochs}" if config.max_epochs is not None else ""
    parts = [f"epoch {int(metrics['epoch'])}{limit}", f"update {int(metrics['step'])}"]
    parts += [f"{key} {SHOWN[key].format(metrics[key])}" for key in shown("progress") if key in metrics]
    return "  ".join(parts)


def update_line(metrics: dict[str, float], step: int, config: TrainConfig, elapsed: float,
                eta: float | None) -> str:
    """Every ``log_every`` updates: update, epoch, loss, lr, target tokens/s, elapsed and ETA."""
    limit = f"/{config.max_updates}" if config.max_updates is not None else ""
    return (f"update {step}{limit}  epoch {int(metrics['epoch'])}  loss {metrics['train_loss']:.3f}  "
            f"lr {metrics['lr']:.2e}  tok/s {metrics['tokens_per_s']:.0f}  elapsed {clock(elapsed)}"
            + (f"  eta {clock(eta)}" if eta is not None else ""))


def clock(seconds: float) -> str:
    """``1:02:03`` or ``2:03`` (minutes:seconds under an hour)."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
