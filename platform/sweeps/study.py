"""The sweep's Optuna study, live: an RDB storage from the first trial (``optuna.db``, SQLite,
beside the sweep by default; any SQLAlchemy URL with ``--study-storage`` or
``$NMT_STUDY_STORAGE``, which ``ray_cluster.yaml`` points at the head's PostgreSQL), Optuna's
plots drawn from it at the end, and a copy on the sweep's MLflow parent run.  One storage holds
many sweeps' studies, each under its sweep's name.

The searcher (``searcher.make_searcher``) samples and tells through that storage, so
``optuna-dashboard sqlite:///runs/SWEEP/optuna.db`` (the ``dashboard`` extra) shows the trials
while the sweep runs, and ``--resume`` continues the same study.  Only Optuna's public API
reads it here.

Parameter importances need finished trials: they are fitted on the COMPLETE trials when there
are at least ``MIN_COMPLETE``; otherwise on the metric every trial reported at the latest epoch
that at least ``MIN_COMPLETE`` trials reached (the scheduler's rungs), and the plot's title
says which.  The contour plot pairs the ``CONTOUR_KNOBS`` most important knobs (the space's
first ones where importances cannot be fitted yet): Optuna's default, every pair of every knob,
is a grid of 49 panels for a 7-knob space, seconds to draw at every sweep's end and too small to
read.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from collections import Counter
from pathlib import Path

from platform import atomic
from platform.errors import UserError
from platform.redaction import redact

STUDY_FILE = "optuna.db"
PASSWORD_FILES_ENV = "NMT_PASSWORD_FILES"  # where kept_url's password files go (default ~/.cache/syntax-nmt/pgpass)
STORAGE_ENV = "NMT_STUDY_STORAGE"  # the default --study-storage (the cluster file sets it)
MIN_COMPLETE = 4  # trials an importance plot is fitted on, at least
CONTOUR_KNOBS = 3  # the contour plot's knobs (every pair of them)
SCHEMA_ATTEMPTS = 5  # tries to open a storage whose new schema another connection is creating
ONE_OBJECTIVE = ("intermediate_values", "optimization_history", "slice", "contour")  # not drawn for several

# Optuna's matplotlib plots: file name → function name in optuna.visualization.matplotlib
PLOTS = {
    "param_importances": "plot_param_importances",
    "intermediate_values": "plot_intermediate_values",
    "optimization_history": "plot_optimization_history",
    "slice": "plot_slice",
    "contour": "plot_contour",
    "pareto_front": "plot_pareto_front",
}


def default_storage_url(sweep_path: str, name: str) -> str:
    """``$NMT_STUDY_STORAGE`` where set; else the study's SQLite file: in the sweep's directory,
    or (for URI storage such as s3://) ``runs/NAME/optuna.db`` under the current directory, on
    the driver's disk."""
    if os.environ.get(STORAGE_ENV):
        return os.environ[STORAGE_ENV]
    directory = Path("runs") / name if "://" in sweep_path else Path(sweep_path)
    return f"sqlite:///{directory.resolve() / STUDY_FILE}"


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL, else None."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return Path(parsed.database) if parsed.get_backend_name() == "sqlite" and parsed.database else None


def kept_url(url: str) -> str:
    """The storage URL Optuna keeps in its storage object, which Ray Tune pickles into the
    sweep's saved state (in its storage path): a PostgreSQL password (the URL's user info or
    ``?password=``) moves to a libpq password file of its own, which the URL then names
    (``?passfile=``), so that state holds no secret and only this storage's connections read it
    (``PGPASSWORD`` would stand in for every other connection's ``~/.pgpass`` in the process).  The
    file (mode 600, under ``~/.cache/syntax-nmt/pgpass``) is named by the rest of the URL, so the
    driver of a resumed sweep writes the same file from the same URL before Tune unpickles it.  A
    password that cannot move so (another database's, an ``sslpassword``) is refused."""
    from sqlalchemy.engine import URL, make_url

    if "://" not in url:
        return url
    parsed = make_url(url)
    parsed = parsed.set(drivername=parsed.drivername.lower())  # POSTGRESQL:// is postgresql://
    query = dict(parsed.query)
    password = parsed.password if parsed.password is not None else query.pop("password", None)
    if "sslpassword" in query:
        raise UserError(f"{redact(url)}: an sslpassword in the study storage's URL would be saved with the sweep "
                        f"(Ray Tune pickles the URL); use a client key without a passphrase, readable by you only")
    if password is None:
        return url
    if parsed.get_backend_name() not in ("postgresql", "cockroachdb"):
        raise UserError(f"{redact(url)}: a {parsed.get_backend_name()} password in the study storage's URL would be "
                        f"saved with the sweep (Ray Tune pickles the URL); put it in the database client's own "
                        f"option file instead")
    without = URL.create(parsed.drivername, parsed.username, None, parsed.host, parsed.port, parsed.database, query)
    passfile = _password_file(without.render_as_string(hide_password=False), str(password))
    return without.update_query_dict({"passfile": str(passfile)}).render_as_string(hide_password=False)


def _password_file(url: str, password: str) -> Path:
    """A libpq password file that gives ``password`` to any connection that names it."""
    directory = Path(os.environ.get(PASSWORD_FILES_ENV) or Path.home() / ".cache" / "syntax-nmt" / "pgpass")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / hashlib.sha256(url.encode()).hexdigest()[:16]
    escaped = password.replace("\\", "\\\\").replace(":", "\\:")
    old = os.umask(0o077)  # libpq ignores a password file others can read
    try:
        atomic.write_file(path, lambda handle: handle.write(f"*:*:*:*:{escaped}\n".encode()))
    finally:
        os.umask(old)
    path.chmod(0o600)
    return path


def open_storage(url: str):
    """Optuna's RDB storage at ``url`` (a SQLite file's folder is made), or None for ''."""
    if not url:
        return None
    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    return _rdb_storage(kept_url(url))


def _rdb_storage(url: str, attempts: int = SCHEMA_ATTEMPTS):
    """``optuna.storages.RDBStorage(url)``, tried again while another connection creates the
    same new schema: two processes opening a new ``optuna.db`` at once (the sweep and an
    ``optuna-dashboard`` started beside it) both create its tables and version row, and the
    slower one fails with 'table ... already exists' or a UNIQUE constraint on
    ``alembic_version``.  Once the faster one is done the schema is complete, and opening it
    again succeeds."""
    import time

    import optuna
    from sqlalchemy.exc import IntegrityError, OperationalError

    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url)
        except (IntegrityError, OperationalError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def load_study(url: str, name: str):
    """The sweep's study from its storage, or None where it has none (yet)."""
    import optuna

    if not url:
        return None
    url = kept_url(url)
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        return None
    try:
        return optuna.load_study(study_name=name, storage=_rdb_storage(url))
    except KeyError:  # no such study in that storage
        return None


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


def importance_study(study):
    """(the study importances are fitted on, what it holds): the study itself when it has
    ``MIN_COMPLETE`` COMPLETE trials; else a study of the metric every trial reported at the
    latest epoch that ``MIN_COMPLETE`` trials reached (pruned ones included); (None, reason)
    when neither has enough."""
    import optuna
    from optuna.trial import TrialState, create_trial

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(study.directions) > 1:
        return (study, f"{len(complete)} complete trials") if len(complete) >= MIN_COMPLETE else (None, "")
    if len(complete) >= MIN_COMPLETE:
        return study, f"{len(complete)} complete trials"
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    reached = Counter(step for trial in finished for step in trial.intermediate_values)
    epochs = [step for step, count in reached.items() if count >= MIN_COMPLETE]
    if not epochs:
        return None, f"fewer than {MIN_COMPLETE} trials reached any epoch"
    epoch = max(epochs)
    derived = optuna.create_study(direction=study.direction)
    for trial in finished:
        if epoch in trial.intermediate_values:
            derived.add_trial(create_trial(params=trial.params, distributions=trial.distributions,
                                           value=trial.intermediate_values[epoch]))
    return derived, f"the metric at epoch {epoch} of {reached[epoch]} trials (fewer than {MIN_COMPLETE} complete)"


def study_plots(study, directory: Path) -> list[Path]:
    """Optuna's plots of ``study`` as PNGs in ``directory``; a plot Optuna refuses for this
    study (too few trials or parameters, one objective for a Pareto front) is left out rather
    than failing the sweep's end; importances only from enough trials (``importance_study``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as optuna_plots

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    several = len(study.directions) > 1
    importance = importance_study(study)  # (the study importances are fitted on, what it holds)
    for name, function in PLOTS.items():
        if (name == "pareto_front" and not several) or (name in ONE_OBJECTIVE and several):
            continue
        source, note = (importance if name == "param_importances" else (study, ""))
        if source is None:
            continue
        first_objective = several and name == "param_importances"
        kwargs = {"target": lambda t: t.values[0], "target_name": "objective 0"} if first_objective else {}
        if name == "contour":
            kwargs["params"] = contour_knobs(study, importance[0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna marks its matplotlib backend experimental
            try:
                drawn = getattr(optuna_plots, function)(source, **kwargs)
            except (ValueError, RuntimeError, ZeroDivisionError):  # too few trials for this plot
                plt.close("all")
                continue
        axes = drawn.flat[0] if hasattr(drawn, "flat") else drawn
        if note:
            axes.set_title(f"{axes.get_title()}\nfrom {note}")
        figure = axes.figure
        figure.set_size_inches(max(figure.get_size_inches()[0], 8), max(figure.get_size_inches()[1], 5))
        path = directory / f"{name}.png"
        figure.savefig(path, dpi=100, bbox_inches="tight")
        plt.close("all")
        written.append(path)
    return written


def contour_knobs(study, source) -> list[str]:
    """The ``CONTOUR_KNOBS`` knobs the contour plot pairs: the most important ones, fitted on
    ``source`` (``importance_study``'s, as the importance plot is), else the first ones the
    trials sampled."""
    import optuna

    if source is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                fitted = optuna.importance.get_param_importances(
                    source, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))  # the same knobs each time
                return list(fitted)[:CONTOUR_KNOBS]
            except (ValueError, RuntimeError, ZeroDivisionError):  # e.g. no knob varied
                pass
    knobs = dict.fromkeys(name for trial in study.get_trials(deepcopy=False) for name in trial.params)
    return list(knobs)[:CONTOUR_KNOBS]


def log_study(logger, study, name: str, sweep_path: str, url: str = "") -> Path | None:
    """Log the study (its live SQLite file when it is one, else a copy) and its plots to the
    sweep's parent run under ``optuna/``; returns the local study file (None where only a
    scratch copy was made, which is removed once logged)."""
    live = sqlite_file(url) if url else None
    local = "://" not in sweep_path and Path(sweep_path).is_dir()
    with tempfile.TemporaryDirectory(prefix="sweep-study-") as scratch:
        directory = Path(sweep_path) if local else Path(scratch)
        saved = live if live is not None and live.is_file() else save_study(study, name, Path(scratch))
        logger.artifact(saved, "optuna")  # sent at once (the parent's logger does not queue)
        for path in study_plots(study, directory / "optuna_plots"):
            logger.artifact(path, "optuna")
    return saved if live is not None else None
