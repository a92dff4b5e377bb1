"""A sweep's idle CPUs lent to the trials still running (CPU trials only).

Once a sweep has started its last trial, every trial slot that frees up stays empty until the
end: on 2 cores with two trials at a time, the last trial used to train alone on one core
while the other idled (11–14 % of a Quickstart's slot time).  The driver's ``LendingCallback``
sees when no trial is left to start and offers each running trial its share of the empty
slots' CPUs through a small named actor (``CoreLender``); each Train worker's ``CoreBorrower``
asks for its offer every few seconds, borrows the CPUs on its own node (the lender reserves them
with a placement group, so Ray's books stay true and nothing else is scheduled onto them), and
raises ``torch.set_num_threads`` by as many.  An offer withdrawn (a trial became pending again,
e.g. a retry) is given back at the next check, and the lender takes a trial's loans back as soon
as the trial stops running, however its workers ended.  Alone on 2 cores, a Quickstart trial
trained 1.2–1.3× as fast with the lent CPU (docs/results.md): a second thread is worth much less
than a second trial slot on these small models, which is why lending waits for the last trial.

More threads change the order of floating-point sums, so a trial that borrowed is not
bit-identical to one that did not; CPU training here is not bit-reproducible across runs anyway.
"""

from __future__ import annotations

import os
import sys
import time

CHECK_EVERY_S = 2.0  # how often a worker asks for its offer (a ~ms actor call, never waited on)
RETRY_AFTER_S = 30.0  # after a loan its node could not place: the CPUs are elsewhere
PLACE_WITHIN_S = 1.0  # how long the lender waits for a loan's placement group to be placed


def lender_name(parent_run_id: str) -> str:
    """The lender actor's name: one per sweep (its MLflow parent run), the same on ``--resume``."""
    return f"nmt-core-lender-{parent_run_id}"


class CoreLender:
    """A Ray actor (0 CPUs, owned by the sweep's driver): the driver's offers (trial id → extra
    CPUs for each of its workers) and the loans made on them, as placement groups it created.

    The lender, not the worker, owns the placement groups: Ray removes a group with its creator
    only once the creator's *job* has ended too, so a Train worker killed mid-loan (ASHA stops
    its trial, Tune tears a finished trial down) would hold its CPUs until the sweep ended.  The
    lender returns a trial's loans as soon as the driver no longer sees it running, and once
    closed lends nothing more.  Its groups are named ``<lender>/<trial>/<worker>/<n>``, so the
    driver can find any it left behind (a killed driver: ``release_leftover_loans``)."""

    def __init__(self, name: str):
        self.name, self.made, self.closed = name, 0, False
        self.offers: dict[str, float] = {}
        self.loans: dict[tuple[str, str], tuple[int, str, object]] = {}  # (trial, worker) → (CPUs, node, group)

    def offer(self, offers: dict[str, float], running: list[str]) -> None:
        self.offers = dict(offers)
        for trial, worker in [key for key in self.loans if key[0] not in set(running)]:
            self.give_back(trial, worker)

    def get(self, trial_id: str) -> float:
        return self.offers.get(trial_id, 0.0)

    def borrow(self, trial_id: str, worker: str, cpus: int, node_id: str) -> int:
        """Lend ``cpus`` CPUs on ``node_id`` to ``worker`` of ``trial_id`` if the offer stands
        and the node can place them at once; returns the CPUs it holds on loan now (a loan it
        held already stays if a different one cannot be placed)."""
        held, node, _ = self.loans.get((trial_id, worker), (0, node_id, None))
        if node != node_id:  # a restarted worker elsewhere: the old loan is on the wrong node
            self.give_back(trial_id, worker)
            held = 0
        if self.closed or cpus > self.offers.get(trial_id, 0.0) or cpus == held:
            return held
        self.made += 1
        group = _place(cpus, node_id, f"{self.name}/{trial_id}/{worker}/{self.made}") if cpus else None
        if cpus and group is None:
            return held
        self.give_back(trial_id, worker)
        if group is not None:
            self.loans[(trial_id, worker)] = (cpus, node_id, group)
        return cpus

    def give_back(self, trial_id: str, worker: str) -> None:
        from ray.util.placement_group import remove_placement_group

        _, _, group = self.loans.pop((trial_id, worker), (0, "", None))
        if group is not None:
            remove_placement_group(group)

    def close(self) -> None:
        """Every loan back, and no more loans (the sweep is over)."""
        self.closed, self.offers = True, {}
        for trial, worker in list(self.loans):
            self.give_back(trial, worker)


def _place(cpus: int, node_id: str, name: str):
    """A placement group of ``cpus`` CPUs on node ``node_id`` if Ray places it within
    ``PLACE_WITHIN_S`` (then they are the borrower's in Ray's books), else None (withdrawn)."""
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{"CPU": float(cpus)}], strategy="STRICT_PACK", name=name,
                            bundle_label_selector=[{"ray.io/node-id": node_id}])
    try:
        if group.wait(timeout_seconds=PLACE_WITHIN_S):
            return group
    except Exception:  # noqa: BLE001 - Ray could not say: not a loan
        pass
    remove_placement_group(group)
    return None


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
    """The sweep's lender actor (0 CPUs, owned by the driver, so it ends with the sweep), after
    taking back what an earlier driver of the sweep left lent (it was killed: ``--resume``)."""
    import ray

    release_leftover_loans(name)
    return ray.remote(num_cpus=0)(CoreLender).options(name=name, get_if_exists=True).remote(name)


def stop_lender(handle, name: str) -> None:
    """Every loan back, then the lender gone (the end of a sweep, however it ends)."""
    import ray

    try:
        ray.get(handle.close.remote(), timeout=30)
    finally:
        ray.kill(handle)
        release_leftover_loans(name)


def release_leftover_loans(name: str) -> list[str]:
    """Remove every placement group the lender ``name`` made that is still there: Ray keeps a
    group made by an actor until that actor *and* its job are gone, and not always then (a
    Ctrl-C'd sweep's last loan outlived both).  Returns the names of those it removed."""
    from ray._raylet import PlacementGroupID
    from ray.util import placement_group_table
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    removed = []
    for group_id, info in placement_group_table().items():
        if info.get("name", "").startswith(f"{name}/") and info.get("state") != "REMOVED":
            remove_placement_group(PlacementGroup(PlacementGroupID(bytes.fromhex(group_id))))
            removed.append(info["name"])
    return removed


def lending_callback(name: str, num_samples: int, max_concurrent: int, cpus_per_worker: float):
    """A Tune callback that keeps the lender ``name``'s offers up to date (sent when they or the
    running trials change).  It holds the name, not a handle: Tune saves its callbacks with the
    experiment, and a resumed sweep's driver starts a new lender of that name, unless it was
    told not to lend; then this callback finds none and stops (lending never stops a sweep)."""
    import ray.tune

    class LendingCallback(ray.tune.Callback):
        def __init__(self):
            self.sent, self.lender, self.off = None, None, False

        def on_step_end(self, iteration, trials, **info):
            if self.off:
                return
            statuses = {t.trial_id: t.status for t in trials}
            now = (offers(statuses, num_samples, max_concurrent, cpus_per_worker),
                   sorted(t for t, status in statuses.items() if status == "RUNNING"))
            if now == self.sent:
                return
            try:
                import ray

                self.lender = self.lender or ray.get_actor(name)
                self.lender.offer.remote(*now)
                self.sent = now
            except Exception as error:  # noqa: BLE001 - no lender: this sweep does not lend
                self.off = True
                sys.stderr.write(f"note: idle CPUs are not lent in this sweep ({type(error).__name__}: {error})\n")

        def __getstate__(self):  # no handle in the saved experiment; a resumed sweep sends its offers anew
            return {"sent": None, "lender": None, "off": False}

    return LendingCallback()


class CoreBorrower:
    """One Train worker's side: ``before_step()`` returns how many trial slots' worth of CPUs
    are lent to this worker for the next update (0 without a loan).  Every ``check_every_s`` it
    asks the lender for its offer without waiting (the answer is read at a later step), borrows
    or returns CPUs as the offer changes, and sets torch's threads to match.  Nothing here can
    fail training: a lender that is gone or slow means no loan."""

    def __init__(self, lender: str, trial_id: str, worker: str, cpus_per_worker: float,
                 check_every_s: float = CHECK_EVERY_S, cores: int | None = None):
        import ray

        self.lender_name, self.lender = lender, None  # the handle, looked up at the first check
        self.trial_id, self.worker, self.cpus_per_worker = trial_id, worker, cpus_per_worker
        self.base = max(1, int(cpus_per_worker))
        self.node_id = ray.get_runtime_context().get_node_id()
        self.cores = cores or _usable_cores()
        self.check_every_s = check_every_s
        self.extra, self.asked, self.next_check = 0, None, 0.0
        self.refused: tuple[int, float] | None = None  # (extra CPUs, when) the lender could not place them

    def before_step(self) -> float:
        try:
            offered = self._answer()
            if offered is not None:
                self._follow(offered)
        except Exception as error:  # noqa: BLE001 - lending is never worth a failed trial
            self._warn(error)
        return self.extra / self.cpus_per_worker if self.extra else 0.0

    def _answer(self) -> int | None:
        """The offer asked for at an earlier step, once it has come (None until then)."""
        import ray

        now = time.monotonic()
        if self.asked is None:
            if now < self.next_check:
                return None
            self.lender = self.lender or ray.get_actor(self.lender_name)
            self.asked, self.next_check = self.lender.get.remote(self.trial_id), now + self.check_every_s
        ready, _ = ray.wait([self.asked], timeout=0)
        if not ready:
            return None
        offered, self.asked = ray.get(ready[0]), None
        return max(0, min(int(offered), self.cores - self.base))

    def _follow(self, wanted: int) -> None:
        import ray

        now = time.monotonic()
        if wanted == self.extra or (wanted and self.refused and self.refused[0] == wanted
                                    and now - self.refused[1] < RETRY_AFTER_S):
            return
        if wanted < self.extra:  # fewer threads first, then the CPUs back
            _set_threads(self.base + wanted)
        held = ray.get(self.lender.borrow.remote(self.trial_id, self.worker, wanted, self.node_id), timeout=10)
        if held != wanted:
            self.refused = (wanted, now)
        self.extra = held
        _set_threads(self.base + held)

    def give_back(self) -> None:
        """The loan back at the end of training (the lender also takes back a trial's loans
        when the trial stops running, however its workers ended)."""
        import ray

        if self.extra == 0:
            return
        try:
            _set_threads(self.base)
            ray.get(self.lender.give_back.remote(self.trial_id, self.worker), timeout=10)
        except Exception as error:  # noqa: BLE001 - the lender takes it back when the trial ends
            self._warn(error)
        self.extra = 0

    def _warn(self, error: Exception) -> None:
        sys.stderr.write(f"warning: CPU lending: {type(error).__name__}: {error}\n")
        self.lender, self.asked, self.next_check = None, None, time.monotonic() + RETRY_AFTER_S


def _usable_cores() -> int:
    """The cores this process may run on (its affinity on Linux; all of them elsewhere)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
