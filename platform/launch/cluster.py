"""Starting or joining Ray, the same way for every command: the repository as the jobs'
working_dir, a local cluster's dashboard on 127.0.0.1 only, and where Ray keeps its files; how
many sweep trials the cluster fits; and what an interrupted sweep left reserved."""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager
from pathlib import Path

from platform import compat
from platform.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
# gitignore-style, as Ray matches them: the run-time directories only at the top (``platform/data``
# is code and must reach the workers)
RUNTIME_EXCLUDES = [".git", "/data", "/runs", "/mlruns", "*.db", ".venv", "venv", ".ci-venv", "__pycache__"]
# Ray Train V2's controller looks at its workers every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s by
# default): an epoch's result reaches Tune (and ASHA), and a finished training its end, up to that
# late, which a sweep of short trials pays per epoch and per trial (a poll is cheap)
RAY_TRAIN_ENV = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5"}
# and on a cluster on this machine's loopback: without the preemption watcher (an actor process per
# training run that would watch for spot reclaims no node here can have), and looking every 0.1 s
# (each controller state change waits for a look: a training run of a short sweep trial ends
# about a second sooner; a poll per worker, on a few local workers, costs nothing measurable)
LOCAL_RAY_TRAIN_ENV = {"RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0", "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1"}


def runtime_excludes() -> list[str]:
    """What the jobs' ``working_dir`` leaves out: ``RUNTIME_EXCLUDES``, and every virtual
    environment in the checkout whatever its name (a ``pyvenv.cfg``: gigabytes of torch that Ray
    would refuse to upload)."""
    return RUNTIME_EXCLUDES + sorted(f"/{path.name}" for path in ROOT.iterdir() if (path / "pyvenv.cfg").is_file())


def start_ray(address: str | None = None, *, num_cpus: int | None = None, log_to_driver: bool = True) -> None:
    """Join the cluster at ``address`` (or start a local one, with ``num_cpus`` logical CPUs);
    nothing if Ray is initialised already."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return
    compat.check()  # a Ray or MLflow that moved a private API the platform uses: said now, not mid-sweep
    local = address is None or on_loopback(address)
    with _on_loopback(local):
        ray.init(**ray_init_kwargs(address, num_cpus, local=local), log_to_driver=log_to_driver,
                 logging_level="WARNING")


def on_loopback(address: str) -> bool:
    """Whether ``address`` (``host:port``, or ``auto``: the cluster ``ray start`` or a local run
    last started here) names a cluster on this machine's loopback, as the local clusters
    ``start_ray`` starts are (``--address 127.0.0.1:PORT`` joins one)."""
    if address == "auto":
        address = compat.ray_address_from_environment()
    host = address.rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1")


@contextmanager
def _on_loopback(local: bool):
    """While a local cluster starts (or a driver joins one on loopback), Ray takes it for a
    single-machine one, as it does on macOS and Windows: otherwise it replaces 127.0.0.1 by the
    machine's network address (``resolve_ip_for_localhost``) — as the node address, so that the
    GCS, raylet, workers and agents would bind there (or to every interface), and in the address
    a driver joins, which then cannot reach a GCS on loopback.  Restored at once, so that joining
    another cluster later works as usual; the flag is read in this process only (the environment
    variable of the same meaning would reach ``ray start`` in child processes and stop worker
    nodes joining)."""
    with compat.ray_single_machine(local):
        yield


def ray_init_kwargs(address: str | None, num_cpus: int | None = None, local: bool | None = None) -> dict:
    """How the CLIs start or join Ray: the repository as working_dir.  A local cluster (started
    by ``start_ray``) lives on loopback: its node address is 127.0.0.1, so Ray's GCS, raylet,
    workers and agents listen there only (Ray binds its servers to the node address), as does
    the dashboard (reach it through ``ssh -L 8265:127.0.0.1:8265``); nothing is exposed on a
    laptop or a shared box.  ``local``: the cluster is on this machine's loopback (default: only
    one started here)."""
    local = address is None if local is None else local
    env_vars = {**RAY_TRAIN_ENV, **(LOCAL_RAY_TRAIN_ENV if local else {})}
    kwargs = {"address": address, "runtime_env": {"working_dir": str(ROOT), "excludes": runtime_excludes(),
                                                  "env_vars": env_vars}}
    if address is None:
        kwargs["dashboard_host"] = "127.0.0.1"
        kwargs[compat.NODE_IP_ADDRESS] = "127.0.0.1"
        if num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
    return kwargs


STORAGE_ENV = "NMT_STORAGE_PATH"  # the CLIs' default --storage-path (ray_cluster.yaml sets it to the bucket)


def default_storage_path() -> str:
    """``$NMT_STORAGE_PATH`` if set (on a ``ray up`` cluster: shared storage), else ``runs``."""
    return os.environ.get(STORAGE_ENV) or "runs"


def storage_uri(path: str) -> str:
    """Local directories become absolute paths; URIs (s3://, gs://, ...) stay as they are."""
    return path if "://" in path else str(Path(path).resolve())


def default_cpus_per_worker(workers: int) -> float:
    """Share the cluster's CPUs (or this machine's cores) between the workers, at least one each."""
    import ray

    total = ray.cluster_resources().get("CPU", os.cpu_count() or 1) if ray.is_initialized() else (os.cpu_count() or 1)
    return float(max(1, int(total) // workers))


# ----------------------------------------------------------------------------- capacity


DRIVER_CPU = 0.1  # what each sweep trial's function trainable (its trainer's driver) reserves


def max_concurrent_trials(workers: int, cpus_per_worker: float, gpus_per_worker: float,
                          requested: int | None = None, joined: bool = False, log=print) -> int:
    """How many trials run at once: ``requested`` (``--max-concurrent``; default as many as
    fit), at most what the cluster can fit.

    What the cluster can fit is what is up now, except on a cluster the driver joined
    (``--address``), whose autoscaler may add nodes (a ``ray up`` head whose GPU workers start
    on demand): there the limit is what the autoscaler's node types add up to where Ray
    publishes it, and otherwise what is up now or, when nothing fits yet, ``requested`` (default
    1); trials that do not fit yet wait for Ray's autoscaler (said in one line)."""
    import ray

    now = ray.cluster_resources()
    ceiling = _autoscaler_ceiling() if joined else None
    fits_now = trials_that_fit(now, workers, cpus_per_worker, gpus_per_worker)
    fits = trials_that_fit(ceiling, workers, cpus_per_worker, gpus_per_worker) if ceiling else fits_now
    if fits < 1 and joined and ceiling is None:  # e.g. a ray up head before its first GPU worker
        fits = requested or 1
    if fits < 1:
        raise UserError(f"the cluster ({_cluster_text(now, ceiling)}) cannot fit one trial of {workers} workers × "
                        f"{cpus_per_worker} CPUs / {gpus_per_worker} GPUs")
    wanted = min(requested or fits, fits)
    if wanted > fits_now:
        log(f"cluster: {_resources(now)} up now, {fits_now} trial(s) fit; the others wait for Ray's autoscaler to add "
            f"nodes" + (f" (up to {_resources(ceiling)})" if ceiling else ""))
    return wanted


# A sweep-size trial leaves most of a GPU idle, so eight share one; a paper-size model fills a GPU
# by itself (docs/performance.md, "GPU", has the measurements)
SMALL_MODEL_GPU_SHARE = 1 / 8


def auto_gpus_per_worker(gpus: float, size: str) -> float:
    """``--gpus-per-worker``'s default: none on a cluster without GPUs (``gpus`` = 0); a whole GPU
    per worker at ``paper`` size, and an eighth for the smaller sizes, whose trials share a GPU."""
    if gpus <= 0:
        return 0.0
    return 1.0 if size == "paper" else SMALL_MODEL_GPU_SHARE


def cluster_gpus(joined: bool) -> float:
    """GPUs of the cluster now, or the most its autoscaler can bring up (a cluster joined)."""
    import ray

    ceiling = _autoscaler_ceiling() if joined else None
    return max(ray.cluster_resources().get("GPU", 0.0), (ceiling or {}).get("GPU", 0.0))


def check_worker_group(workers: int, cpus_per_worker: float, gpus_per_worker: float, joined: bool = False,
                       log=print) -> None:
    """``platform.train``'s worker group against the cluster, by a sweep's rule for one trial: one
    that fits now starts; on a cluster the driver joined, one that its autoscaler can add (or
    whose autoscaler Ray does not describe) waits for it, said in one line; anything else is a
    one-line error before any work (Ray Train would wait for it forever)."""
    import ray

    now = ray.cluster_resources()
    if trials_that_fit(now, workers, cpus_per_worker, gpus_per_worker, driver_cpu=0.0) >= 1:
        return
    ceiling = _autoscaler_ceiling() if joined else None
    group = f"{workers} worker(s) × {cpus_per_worker:g} CPUs / {gpus_per_worker:g} GPUs"
    if joined and (ceiling is None or trials_that_fit(ceiling, workers, cpus_per_worker, gpus_per_worker,
                                                      driver_cpu=0.0) >= 1):
        log(f"cluster: {_resources(now)} up now; {group} wait for Ray's autoscaler to add nodes")
        return
    raise UserError(f"the cluster ({_cluster_text(now, ceiling)}) cannot hold {group}")


def trials_that_fit(resources: dict[str, float], workers: int, cpus_per_worker: float, gpus_per_worker: float,
                    driver_cpu: float = DRIVER_CPU) -> int:
    """Trials of ``workers`` workers (and their driver's CPU) that ``resources`` hold at once."""
    fits = math.floor(resources.get("CPU", 0) / (workers * cpus_per_worker + driver_cpu) + 1e-9)
    if gpus_per_worker > 0:
        fits = min(fits, math.floor(resources.get("GPU", 0) / (workers * gpus_per_worker) + 1e-9))
    return fits


def _autoscaler_ceiling() -> dict[str, float] | None:
    """The most the cluster's autoscaler can bring up (its node types × their max counts, what
    Ray itself reads from the GCS), or None without an autoscaler (a local or fixed cluster)."""
    try:
        return compat.autoscaler_ceiling()
    except Exception:  # noqa: BLE001 - an internal API: without it, what is up now is the limit
        return None


def _cluster_text(now: dict[str, float], ceiling: dict[str, float] | None) -> str:
    """The cluster's resources now, and the most its autoscaler can bring up."""
    return _resources(now) + (f"; at most {_resources(ceiling)} with its autoscaler" if ceiling else "")


def _resources(resources: dict[str, float]) -> str:
    return f"{resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs"



# ----------------------------------------------------------------------------- leftovers


def orphaned_groups(groups: list[dict], ended_sweeps: set[str], in_use: set[str],
                    this_sweep: tuple[str, set[str]] | None = None) -> list[dict]:
    """The placement groups an ended sweep left behind: not detached, made by a job in
    ``ended_sweeps`` (``platform.tune`` drivers that have ended), no live actor placed in them
    (``in_use``).  ``groups``: Ray's state-API records (``placement_group_id``, ``state``,
    ``is_detached``, ``creator_job_id``).  Nothing of a running job, or of another program,
    except, with ``this_sweep`` (this driver's job id, the groups there were before its Tune
    experiment began), the groups its ended experiment's trials left (``release_orphaned_groups``)."""
    job, before = this_sweep if this_sweep is not None else (None, set())
    return [g for g in groups if g["state"] != "REMOVED" and not g["is_detached"]
            and ((g["creator_job_id"] in ended_sweeps and g["placement_group_id"] not in in_use)
                 or (g["creator_job_id"] == job and g["placement_group_id"] not in before))]


def placement_group_ids() -> set[str] | None:
    """The placement groups not yet removed (what ``release_orphaned_groups(before=...)`` leaves
    alone), or None without Ray's state API."""
    try:
        return {g["placement_group_id"] for g in cluster_records()[2]}
    except Exception:  # noqa: BLE001 - no state API here: nothing can be released afterwards either
        return None


LEFTOVER_WATCH_S = 30.0  # how long, after an experiment, its trials' late groups are watched for


def release_orphaned_groups(log=print, before: set[str] | None = None) -> float:
    """Remove the placement groups ended sweeps left behind (``orphaned_groups``); returns their CPUs.

    Ray removes a non-detached group once its job and its creator have ended, but a Train
    worker group that a controller makes while a Ctrl-C'd sweep tears down can outlive both,
    holding its CPU until the cluster stops: every later sweep would be a trial slot short.
    The same race within a running sweep: a trial that Tune stops (its time budget, a
    scheduler) while its controller starts the worker group leaves that group to Ray's
    placement-group cleaner, which only learns of a group once the worker group has started
    (ray-project/ray#58515), so the group is held for the rest of the driver's life and the next
    experiment of the job waits for its CPU forever.  ``before``: the groups there were when
    this driver's Tune experiment began; once the experiment has ended, the groups its job made
    since, with no live actor in them, are released too.  Needs Ray's state API (the
    dashboard); without it, nothing is done."""
    import ray

    try:
        ended, in_use, groups = cluster_records()
    except Exception:  # noqa: BLE001 - no state API here: nothing to say about leftovers
        return 0.0
    from ray import PlacementGroupID
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    this_sweep = (ray.get_runtime_context().get_job_id(), before) if before is not None else None
    cpus, quiet_checks, deadline = 0.0, 0, time.monotonic() + LEFTOVER_WATCH_S
    while True:
        left = orphaned_groups(groups, ended, in_use, this_sweep)
        for group in left:
            remove_placement_group(PlacementGroup(PlacementGroupID(bytes.fromhex(group["placement_group_id"]))))
            cpus += sum(float(b.get("unit_resources", {}).get("CPU", 0)) for b in group["bundles"] or [])
        # a stopped trial's controller may still make its group a moment after the experiment
        # ended: watched until two looks a second apart find nothing (at most LEFTOVER_WATCH_S)
        quiet_checks = 0 if left else quiet_checks + 1
        if this_sweep is None or quiet_checks >= 2 or time.monotonic() > deadline:
            break
        time.sleep(1.0)
        try:
            ended, in_use, groups = cluster_records()
        except Exception:  # noqa: BLE001 - the state API went away: what was released stays released
            break
    if cpus:
        log(f"cluster: released {cpus:g} CPUs that ended {'trials' if before is not None else 'sweeps'}' "
            "placement groups still held")
    return cpus


def cluster_records() -> tuple[set[str], set[str], list[dict]]:
    """From Ray's state API: the ended ``platform.tune`` jobs, the placement groups live actors
    are placed in, and the placement groups not yet removed (records for ``orphaned_groups``)."""
    from ray.util.state import list_actors, list_jobs, list_placement_groups

    ended = {job.job_id for job in list_jobs(limit=10_000, timeout=10)
             if job.job_id and getattr(job.status, "value", job.status) not in ("PENDING", "RUNNING")
             and "platform.tune" in (job.entrypoint or "")}
    live = list_actors(limit=10_000, detail=True, filters=[("state", "!=", "DEAD")], timeout=10)
    in_use = {a.placement_group_id for a in live if a.placement_group_id}
    groups = [{"placement_group_id": g.placement_group_id, "state": g.state, "is_detached": g.is_detached,
               "creator_job_id": g.creator_job_id, "bundles": g.bundles}
              for g in list_placement_groups(detail=True, limit=10_000, filters=[("state", "!=", "REMOVED")],
                                             timeout=10)]
    return ended, in_use, groups
