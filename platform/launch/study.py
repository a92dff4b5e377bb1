"""The sweep's Optuna study, kept: an RDB storage (``optuna.db``, SQLite) beside the sweep and
on its MLflow parent run, with Optuna's own plots.

The searcher (``searcher.make_searcher``) keeps its study in memory, and Ray saves and restores it
with the experiment, so ``--resume`` continues the same study; at the end of every session the
whole study (trials, their states, the intermediate values ASHA's rungs saw) is copied into
``optuna.db`` under the sweep's name, which ``optuna-dashboard sqlite:///…/optuna.db`` (the
``dashboard`` extra) opens, and Optuna's plots are drawn from it: parameter importances,
intermediate values, optimisation history, slices and contours.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

STUDY_FILE = "optuna.db"

# Optuna's matplotlib plots: file name → function name in optuna.visualization.matplotlib
PLOTS = {
    "param_importances": "plot_param_importances",
    "intermediate_values": "plot_intermediate_values",
    "optimization_history": "plot_optimization_history",
    "slice": "plot_slice",
    "contour": "plot_contour",
}


def save_study(study, name: str, directory: Path) -> Path:
    """Copy ``study`` into ``directory/optuna.db`` as the study ``name`` (replacing an older
    copy: written aside, then renamed), through Optuna's public API: a new study in that
    storage with the same directions and attributes, and every trial added to it."""
    import optuna

    directory.mkdir(parents=True, exist_ok=True)
    final, aside = directory / STUDY_FILE, directory / f".{STUDY_FILE}.tmp"
    aside.unlink(missing_ok=True)
    copy = optuna.create_study(storage=f"sqlite:///{aside}", study_name=name, directions=study.directions)
    for key, value in study.user_attrs.items():
        copy.set_user_attr(key, value)
    copy.add_trials(study.get_trials(deepcopy=False))
    del copy  # its storage's connections close with it
    aside.replace(final)
    return final


def study_plots(study, directory: Path) -> list[Path]:
    """Optuna's plots of ``study`` as PNGs in ``directory``; a plot Optuna refuses for this
    study (too few trials or parameters) is left out rather than failing the sweep's end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as optuna_plots

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, function in PLOTS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna marks its matplotlib backend experimental
            try:
                drawn = getattr(optuna_plots, function)(study)
            except (ValueError, RuntimeError, ZeroDivisionError):  # too few trials for this plot
                plt.close("all")
                continue
        figure = (drawn.flat[0] if hasattr(drawn, "flat") else drawn).figure
        figure.set_size_inches(max(figure.get_size_inches()[0], 8), max(figure.get_size_inches()[1], 5))
        path = directory / f"{name}.png"
        figure.savefig(path, dpi=100, bbox_inches="tight")
        plt.close("all")
        written.append(path)
    return written


def log_study(logger, study, name: str, sweep_path: str) -> Path | None:
    """Save the study (in the sweep's directory when it is local) and log it and its plots to
    the sweep's parent run under ``optuna/``; returns the local ``optuna.db`` (None for URI
    storage, whose scratch copy is removed once logged)."""
    local = "://" not in sweep_path and Path(sweep_path).is_dir()
    with tempfile.TemporaryDirectory(prefix="sweep-study-") as scratch:
        directory = Path(sweep_path) if local else Path(scratch)
        saved = save_study(study, name, directory)
        logger.artifact(saved, "optuna")  # sent at once (the parent's logger does not queue)
        for path in study_plots(study, directory / "optuna_plots"):
            logger.artifact(path, "optuna")
    return saved if local else None
