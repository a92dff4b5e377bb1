"""PNG plots for MLflow: learning curves, and the DBSA parse attention against the reference tree."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import warnings  # noqa: E402

warnings.filterwarnings("ignore", message="Glyph .* missing from font", category=UserWarning)  # CJK labels


def learning_curves(history: list[dict[str, float]], path: str | Path) -> Path:
    """The loss and score panels per epoch (``training.metrics.SHOWN`` says which metric goes where)."""
    epochs = [row["epoch"] for row in history]
    figure, (losses, scores) = plt.subplots(1, 2, figsize=(10, 4))
    from platform.training.metrics import SHOWN, shown

    for key in shown("loss"):
        if any(key in row for row in history):
            losses.plot(epochs, [row.get(key, np.nan) for row in history], marker="o", label=key)
    for key in shown("scores"):
        if any(key in row for row in history):
            scale = SHOWN[key].curve_scale
            scores.plot(epochs, [row.get(key, np.nan) * scale for row in history], marker="o", label=key + (" ×100" if scale > 1 else ""))
    losses.set_xlabel("epoch"), losses.set_title("loss"), losses.legend()
    scores.set_xlabel("epoch"), scores.set_title("dev scores"), scores.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return Path(path)


def parse_attention(attention: list[np.ndarray], heads: list[list[int]], tokens: list[list[str]], path: str | Path,
                    title: str = "encoder parse head") -> Path:
    """One heat map per sentence: rows = dependents, columns = candidate heads; reference heads
    are marked with a box."""
    count = len(attention)
    figure, axes = plt.subplots(1, count, figsize=(4.5 * count, 4.5), squeeze=False)
    for axis, matrix, gold, words in zip(axes[0], attention, heads, tokens):
        axis.imshow(matrix, cmap="Blues", vmin=0.0, vmax=1.0)
        for row, head in enumerate(gold):
            if head >= 0:
                axis.add_patch(plt.Rectangle((head - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5))
        axis.set_xticks(range(len(words)), words, rotation=90, fontsize=7)
        axis.set_yticks(range(len(words)), words, fontsize=7)
        axis.set_xlabel("head")
    figure.suptitle(f"{title}: attention (blue) vs reference heads (red boxes)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return Path(path)


def sweep_plots(rows: list[dict], histories: dict[str, list[float]], knobs: list[str], metric: str,
                directory: str | Path, top: int = 5) -> list[Path]:
    """``metric`` against each knob (one panel per knob) and learning curves of the top trials."""
    directory = Path(directory)
    scored = [row for row in rows if metric in row]
    paths = []
    if scored and knobs:
        figure, axes = plt.subplots(1, len(knobs), figsize=(3.2 * len(knobs), 3), squeeze=False)
        for axis, knob in zip(axes[0], knobs):
            points = [(row.get(knob), row[metric]) for row in scored if row.get(knob) is not None]
            labels = sorted({str(x) for x, _ in points})
            numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x, _ in points)
            xs = [x if numeric else labels.index(str(x)) for x, _ in points]
            axis.scatter(xs, [y for _, y in points])
            if not numeric:
                axis.set_xticks(range(len(labels)), labels, rotation=45)
            axis.set_xlabel(knob), axis.set_ylabel(metric)
        figure.tight_layout()
        paths.append(directory / f"{metric}_by_knob.png")
        figure.savefig(paths[-1], dpi=100)
        plt.close(figure)
    best = [str(row["trial"]) for row in scored[:top]]
    if any(trial in histories for trial in best):
        figure, axis = plt.subplots(figsize=(6, 4))
        for trial in best:
            if trial in histories:
                axis.plot(range(1, len(histories[trial]) + 1), histories[trial], marker="o", label=trial)
        axis.set_xlabel("epoch"), axis.set_ylabel("dev_bleu"), axis.legend(fontsize=7)
        figure.tight_layout()
        paths.append(directory / "top_trials_dev_bleu.png")
        figure.savefig(paths[-1], dpi=100)
        plt.close(figure)
    return paths
