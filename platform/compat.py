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
- ``ASHAScheduler._brackets[0]._rungs``: the rungs, for the tests of a resumed sweep.
- ``mlflow.system_metrics.metrics.*Monitor``: MLflow's system-metric samplers.

For the tests only (they hold no private API of their own either):

- ``ray.autoscaler._private.aws.config.bootstrap_aws``: ``ray up``'s AWS bootstrap of ``ray_cluster.yaml``
  (against a stand-in server).
- ``ray.autoscaler._private.util.prepare_config``/``validate_config``: ``ray_cluster.yaml``
  against the schema ``ray up`` applies.
- ``ray._private.thirdparty.pathspec.PathSpec``: how Ray matches upload excludes.
- ``ray.train.v2._internal.state.state_actor.get_state_actor``: the ranks' pids of a running
  Train run, to kill one on purpose.
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


def asha_rungs(scheduler) -> list[tuple[float, dict]]:
    """ASHA's first bracket's rungs: (milestone, {trial id: value})."""
    return scheduler._brackets[0]._rungs


def validate_cluster_config(config: dict) -> None:
    """Raise on an unknown or malformed field of a ``ray up`` cluster config, as ``ray up`` would."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(config))


def bootstrap_aws_cluster(config: dict) -> dict:
    """What ``ray up`` does with a cluster config before it launches anything on AWS: Ray's
    validation, then its AWS bootstrap (the head's IAM role and instance profile, the key pair,
    subnets, the security group, the image), against whatever endpoint boto3 is given
    (``AWS_ENDPOINT_URL``).  Returns the bootstrapped config."""
    from ray.autoscaler._private.aws.config import bootstrap_aws
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(config)
    validate_config(prepared)
    return bootstrap_aws(prepared)


def ray_path_spec(patterns: list[str]):
    """The matcher Ray applies to ``excludes`` and ``.gitignore`` when it uploads a working_dir."""
    from ray._private.thirdparty.pathspec import PathSpec

    return PathSpec.from_lines("gitwildmatch", patterns)


def train_worker_pids() -> dict[int, int]:
    """{world rank: pid} of the running attempt's live Ray Train workers, from Ray Train's state
    actor (the driver needs ``RAY_TRAIN_ENABLE_STATE_TRACKING=1``); {} before it exists."""
    import ray
    from ray.train.v2._internal.state.state_actor import get_state_actor

    actor = get_state_actor()
    if actor is None:
        return {}
    found = {}
    for attempts in ray.get(actor.get_train_run_attempts.remote()).values():
        for attempt in attempts.values():
            if attempt.status.value == "RUNNING":
                found.update({w.world_rank: w.pid for w in attempt.workers if w.status is None or w.status.value == "ALIVE"})
    return found


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
