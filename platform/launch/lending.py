"""A sweep's idle CPUs lent to the trials still running (CPU trials only).

Once a sweep has started its last trial, every trial slot that frees up stays empty until the
end: on 2 cores with two trials at a time, the last trial used to train alone on one core
while the other idled (11–14 % of a Quickstart's slot time).  The driver's ``LendingCallback``
sees when no trial is left to start and offers each running trial its share of the empty
slots' CPUs through a small named actor (``CoreLender``); each Train worker's ``CoreBorrower``
asks for its offer every few seconds, reserves the CPUs on its own node with a placement group
(so Ray's accounting stays true and nothing else is scheduled onto them), and raises
``torch.set_num_threads`` by as many.  An offer withdrawn (a trial became pending again, e.g.
a retry) is given back at the next check; the reservation fate-shares with the worker, so a
killed trial frees it too.  On 2 cores the sweep's model trains 1.5–1.6× as fast on 2 threads
as on 1 (8.5k → 12–13k tokens/s in a Quickstart's last trial; ``python -m platform.bench
--threads``), and the Quickstart ended 40 s sooner (docs/results.md).

More threads change the order of floating-point sums, so a trial that borrowed is not
bit-identical to one that did not; CPU training here is not bit-reproducible across runs anyway.
"""

from __future__ import annotations

import os
import time

CHECK_EVERY_S = 2.0  # how often a worker asks for its offer (a ~ms actor call)
RETRY_AFTER_S = 30.0  # after a reservation its node could not place: the CPUs are elsewhere


def lender_name(parent_run_id: str) -> str:
    """The lender actor's name: one per sweep (its MLflow parent run), the same on ``--resume``."""
    return f"nmt-core-lender-{parent_run_id}"


class CoreLender:
    """The offers the driver makes (trial id → extra CPUs for each of its workers); a Ray actor."""

    def __init__(self):
        self.offers: dict[str, float] = {}

    def offer(self, offers: dict[str, float]) -> None:
        self.offers = dict(offers)

    def get(self, trial_id: str) -> float:
        return self.offers.get(trial_id, 0.0)


def offers(statuses: dict[str, str], num_samples: int, max_concurrent: int, cpus_per_worker: float) -> dict[str, float]:
    """Extra CPUs per worker for each running trial (``statuses``: trial id → Tune status):
    none while a trial may still start (fewer than ``num_samples`` made, or one pending);
    then the empty slots (``max_concurrent`` less the running trials), shared out one slot at a
    time in trial order, each slot worth ``cpus_per_worker`` more CPUs per worker."""
    running = sorted(trial for trial, status in statuses.items() if status == "RUNNING")
    waiting = any(status in ("PENDING", "PAUSED") for status in statuses.values())
    if not running or waiting or len(statuses) < num_samples:
        return {}
    free = max(0, max_concurrent - len(running))
    slots = {trial: free // len(running) + (1 if index < free % len(running) else 0)
             for index, trial in enumerate(running)}
    return {trial: count * cpus_per_worker for trial, count in slots.items() if count}


def start_lender(name: str):
    """The sweep's lender actor (0 CPUs, owned by the driver, so it ends with the sweep)."""
    import ray

    return ray.remote(num_cpus=0)(CoreLender).options(name=name, get_if_exists=True).remote()


def lending_callback(name: str, num_samples: int, max_concurrent: int, cpus_per_worker: float):
    """A Tune callback that keeps the lender ``name``'s offers up to date (sent when they
    change).  It holds the name, not a handle: Tune saves its callbacks with the experiment,
    and a resumed sweep's driver starts a new lender of the same name (``start_lender``)."""
    import ray.tune

    class LendingCallback(ray.tune.Callback):
        def __init__(self):
            self.sent: dict[str, float] = {}
            self.lender = None

        def on_step_end(self, iteration, trials, **info):
            now = offers({t.trial_id: t.status for t in trials}, num_samples, max_concurrent, cpus_per_worker)
            if now != self.sent:
                self._lender().offer.remote(now)
                self.sent = now

        def _lender(self):
            import ray

            if self.lender is None:
                self.lender = ray.get_actor(name)
            return self.lender

        def __getstate__(self):  # no handle in the saved experiment; a resumed sweep sends its offers anew
            return {"sent": {}, "lender": None}

    return LendingCallback()


class CoreBorrower:
    """One Train worker's side: ``before_step()`` returns how many slots' worth of extra
    threads the next step runs with (0 without a loan), checking the offer every
    ``check_every_s`` and reserving or returning CPUs on this worker's node as it changes."""

    def __init__(self, lender: str, trial_id: str, base_threads: int, check_every_s: float = CHECK_EVERY_S,
                 cores: int | None = None):
        import ray

        self.lender_name, self.lender = lender, None  # the handle, looked up at the first check
        self.trial_id, self.base = trial_id, max(1, base_threads)
        self.node_id = ray.get_runtime_context().get_node_id()
        self.cores = cores or _usable_cores()
        self.check_every_s = check_every_s
        self.extra, self.group = 0, None
        self.next_check = 0.0
        self.refused: tuple[int, float] | None = None  # (extra CPUs, when) its node could not place

    def before_step(self) -> float:
        now = time.monotonic()
        if now >= self.next_check:
            self.next_check = now + self.check_every_s
            self._follow(self._offer(), now)
        return self.extra / self.base

    def _offer(self) -> int:
        import ray

        try:
            self.lender = self.lender or ray.get_actor(self.lender_name)
            offered = ray.get(self.lender.get.remote(self.trial_id), timeout=5)
        except Exception:  # noqa: BLE001 - no lender (the driver is gone) or a busy one: borrow nothing
            return 0
        return max(0, min(int(offered), self.cores - self.base))

    def _follow(self, wanted: int, now: float) -> None:
        if wanted == self.extra:
            return
        self.give_back()
        if wanted == 0 or (self.refused and self.refused[0] == wanted and now - self.refused[1] < RETRY_AFTER_S):
            return
        self.group = reserve(wanted, self.node_id)
        if self.group is None:
            self.refused = (wanted, now)
            return
        self.extra = wanted
        _set_threads(self.base + self.extra)

    def give_back(self) -> None:
        """Return the loan (threads first, then the CPUs); also at the end of training."""
        if self.group is None:
            return
        from ray.util.placement_group import remove_placement_group

        _set_threads(self.base)
        remove_placement_group(self.group)
        self.group, self.extra = None, 0


def reserve(cpus: int, node_id: str, wait_s: float = 1.0):
    """A placement group of ``cpus`` CPUs on node ``node_id`` if it can be placed within
    ``wait_s`` (then it is theirs in Ray's books), else None (the request is withdrawn)."""
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{"CPU": float(cpus)}], strategy="STRICT_PACK",
                            bundle_label_selector=[{"ray.io/node-id": node_id}])
    if group.wait(timeout_seconds=wait_s):
        return group
    remove_placement_group(group)
    return None


def _usable_cores() -> int:
    """The cores this process may run on (its affinity on Linux; all of them elsewhere)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
