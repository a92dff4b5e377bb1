"""PNG plots for MLflow: learning curves, and the DBSA parse attention against the reference tree."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import warnings

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import ticker

from platform.training.metrics import SHOWN, shown

warnings.filterwarnings("ignore", message="Glyph .* missing from font", category=UserWarning)  # CJK labels


def learning_curves(history: list[dict[str, float]], path: str | Path) -> Path:
    """The loss and score panels per report, over updates (``training.metrics.SHOWN`` says
    which metric goes where; a checkpoint without validation has no dev points)."""
    epochs = [row.get("step", row["epoch"]) for row in history]
    figure, (losses, scores) = plt.subplots(1, 2, figsize=(10, 4))

    for key in shown("loss"):
        if any(key in row for row in history):
            losses.plot(epochs, [row.get(key, np.nan) for row in history], marker="o", label=key)
    for key in shown("scores"):
        if any(key in row for row in history):
            scale = SHOWN[key].curve_scale
            label = key + (" ×100" if scale > 1 else "")
            scores.plot(epochs, [row.get(key, np.nan) * scale for row in history], marker="o", label=label)
    losses.set_xlabel("update"), losses.set_title("loss"), losses.legend()
    scores.set_xlabel("update"), scores.set_title("dev scores"), scores.legend()
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
                directory: str | Path, log_knobs: set[str] = frozenset()) -> list[Path]:
    """One figure that answers "which knob mattered": the first panel has every trial's
    learning curve (finished trials solid, pruned dashed, the best thick), then one panel per
    knob with each trial's best ``metric`` against the knob's value (log axes where the space
    samples on a log scale; pruned trials hollow, the best starred)."""
    directory = Path(directory)
    scored = [row for row in rows if metric in row and str(row.get("status", "")).upper() not in ("ERROR", "FAILED")]
    if not scored:
        return []
    best = str(scored[0]["trial"])
    columns = min(4, len(knobs) + 1)
    grid_rows = math.ceil((len(knobs) + 1) / columns)
    figure, axes = plt.subplots(grid_rows, columns, figsize=(3.6 * columns, 3.0 * grid_rows), squeeze=False)
    _curves_panel(axes[0][0], scored, histories, metric, best)
    for axis, knob in zip(axes.flat[1:], knobs):
        _knob_panel(axis, scored, knob, metric, best, knob in log_knobs)
    for axis in list(axes.flat)[len(knobs) + 1:]:
        axis.set_visible(False)
    figure.suptitle(f"{metric} of {len(scored)} trials (best: {best}, {scored[0][metric]:.1f})", fontsize=10)
    figure.tight_layout()
    path = directory / "sweep.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return [path]


def _curves_panel(axis, scored: list[dict], histories: dict[str, list[float]], metric: str, best: str) -> None:
    for row in reversed(scored):  # the best drawn last, on top
        trial = str(row["trial"])
        if trial not in histories:
            continue
        values = histories[trial]
        style = {"linewidth": 2.5, "color": "black", "zorder": 3} if trial == best else {"linewidth": 1, "alpha": 0.8}
        axis.plot(range(1, len(values) + 1), values, marker="o", markersize=3,
                  linestyle="--" if str(row.get("status", "")).upper() == "PRUNED" else "-", label=trial, **style)
    axis.set_xlabel("epoch"), axis.set_ylabel(metric), axis.set_title("learning curves", fontsize=9)
    axis.xaxis.get_major_locator().set_params(integer=True)
    if len(scored) <= 8:
        axis.legend(fontsize=6)


def _knob_panel(axis, scored: list[dict], knob: str, metric: str, best: str, log: bool) -> None:
    points = [row for row in scored if row.get(knob) is not None]
    labels = sorted({str(row[knob]) for row in points})
    numeric = all(isinstance(row[knob], (int, float)) and not isinstance(row[knob], bool) for row in points)
    x = (lambda row: row[knob]) if numeric else (lambda row: labels.index(str(row[knob])))
    for pruned in (False, True):
        group = [row for row in points
                 if (str(row.get("status", "")).upper() == "PRUNED") == pruned and str(row["trial"]) != best]
        axis.scatter([x(row) for row in group], [row[metric] for row in group], s=28,
                     facecolors="none" if pruned else "tab:blue", edgecolors="tab:blue",
                     label="pruned" if pruned else "finished")
    for row in points:
        if str(row["trial"]) == best:
            axis.scatter([x(row)], [row[metric]], marker="*", s=160, color="black", zorder=3, label="best")
    if log and numeric:
        axis.set_xscale("log")
        axis.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        axis.xaxis.set_minor_formatter(ticker.NullFormatter())
        axis.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    elif numeric and all(isinstance(row[knob], int) for row in points):
        axis.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    if not numeric:
        axis.set_xticks(range(len(labels)), labels, rotation=45)
    axis.set_xlabel(knob), axis.set_ylabel(metric)
