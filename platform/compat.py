"""Every private Ray, Optuna and MLflow API the platform uses, in one place.

Each is checked against the versions in ``CHECKED_AGAINST`` (also pyproject.toml's upper
bounds and ``constraints.txt``); ``check()`` runs when the CLIs start Ray and names any that a
newer release moved, instead of failing somewhere in the middle of a sweep.
``tests/test_compat.py`` keeps every other module off private APIs.

- ``ray._private.services.get_ray_address_from_environment``: what ``--address auto`` names.
- ``ray._private.ray_constants.ENABLE_RAY_CLUSTER``: a local cluster on loopback
  (``launch.cluster.start_ray``).
- ``ray.init(_node_ip_address=...)``: the local cluster's node address, 127.0.0.1.
- ``ray._private.state.state.get_max_resources_from_cluster_config``: what an autoscaler can add.
- ``ray.train.v2._internal.execution.context``: the logger that dumps every report.
- ``OptunaSearch._ot_study``, ``._ot_trials``, ``._completed_trials``: pruned trials told to
  Optuna as PRUNED, and the study read back for its export.
- ``ResultGrid._experiment_analysis.trials``: every trial of a sweep, reported or not.
- ``mlflow.system_metrics.metrics.*Monitor``: MLflow's system-metric samplers.

The tests' own private Ray APIs are in ``tests/ray_private.py``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHECKED_AGAINST = {"ray": "2.60.0", "optuna": "5.0.0", "mlflow": "3.17.2"}
NODE_IP_ADDRESS = "_node_ip_address"  # ray.init's keyword for the node address
OPTUNA_SEARCH_ATTRIBUTES = ("_ot_study", "_ot_trials", "_completed_trials")
MONITORS = {"CPUMonitor": "cpu_monitor", "DiskMonitor": "disk_monitor", "NetworkMonitor": "network_monitor",
            "GPUMonitor": "gpu_monitor"}
MODULE_ATTRIBUTES = [  # (module, attribute) that must exist
    ("ray._private.services", "get_ray_address_from_environment"),
    ("ray._private.ray_constants", "ENABLE_RAY_CLUSTER"),
    ("ray._private.state", "state"),
    ("ray.train.v2._internal.execution.context", "__file__"),
    *((f"mlflow.system_metrics.metrics.{module}", name) for name, module in MONITORS.items() if name != "GPUMonitor"),
]


# ----------------------------------------------------------------------------- Ray


def ray_address_from_environment() -> str:
    """The address ``auto`` names (the cluster ``ray start`` or a local run last started here), or ''."""
    from ray._private.services import get_ray_address_from_environment

    return get_ray_address_from_environment("auto", None) or ""


@contextmanager
def ray_single_machine(local: bool) -> Iterator[None]:
    """While a local cluster starts, Ray treats it as a single-machine one (see
    ``launch.cluster._on_loopback``); restored after."""
    from ray._private import ray_constants

    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = saved and not local
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def autoscaler_ceiling() -> dict[str, float] | None:
    """The most the cluster's autoscaler can bring up (node types × max counts, as Ray reads
    them from the GCS), or None without an autoscaler."""
    from ray._private.state import state

    return state.get_max_resources_from_cluster_config() or None


def train_report_logger() -> str | None:
    """The name of the logger through which Ray Train V2 dumps every report (its file path)."""
    try:
        from ray.train.v2._internal.execution import context
    except ImportError:
        return None
    return context.__file__


def optuna_study(searcher) -> Any:
    """The Optuna study an ``OptunaSearch`` samples from (None for one never set up)."""
    return getattr(searcher, "_ot_study", None)


def optuna_trials(searcher) -> dict:
    """``OptunaSearch``'s Ray trial id → Optuna trial."""
    return searcher._ot_trials


def completed_trials(searcher) -> set:
    """The Ray trial ids ``OptunaSearch`` has told Optuna about."""
    return searcher._completed_trials


def tune_trial_ids(results) -> set[str]:
    """The ids of every trial a Tune ``ResultGrid`` holds, reported or not (its public
    ``Result``s carry an id only in what a trial reported)."""
    return {trial.trial_id for trial in results._experiment_analysis.trials}


# ----------------------------------------------------------------------------- MLflow


def mlflow_monitor(name: str):
    """MLflow's system-metric monitor class ``name`` (``CPUMonitor``, ``GPUMonitor``, ...)."""
    module = importlib.import_module(f"mlflow.system_metrics.metrics.{MONITORS[name]}")
    return getattr(module, name)


# ----------------------------------------------------------------------------- the check


def missing() -> list[str]:
    """The module-level private APIs above that the installed Ray and MLflow do not have."""
    import inspect

    import ray

    gone = []
    for module, attribute in MODULE_ATTRIBUTES:
        try:
            if not hasattr(importlib.import_module(module), attribute):
                gone.append(f"{module}.{attribute}")
        except ImportError:
            gone.append(module)
    if NODE_IP_ADDRESS not in inspect.getsource(inspect.unwrap(ray.init)):  # a keyword of its **kwargs
        gone.append(f"ray.init({NODE_IP_ADDRESS}=...)")
    return gone


def check(gone: list[str] | None = None) -> None:
    """An error naming every private API that moved (``missing()``, or ``gone``), with the
    versions this code was checked against."""
    gone = missing() if gone is None else gone
    if gone:
        from importlib.metadata import version

        installed = ", ".join(f"{name} {version(name)}" for name in CHECKED_AGAINST)
        checked = ", ".join(f"{name} {number}" for name, number in CHECKED_AGAINST.items())
        raise RuntimeError(f"{installed} lack what the platform uses ({', '.join(gone)}); it was checked against "
                           f"{checked}: install within pyproject.toml's bounds (pip install -c constraints.txt)")


def check_searcher(searcher) -> None:
    """``check`` for a live ``OptunaSearch``'s attributes."""
    check([f"OptunaSearch.{name}" for name in OPTUNA_SEARCH_ATTRIBUTES if not hasattr(searcher, name)])
