"""System metrics of a training run, per node: CPU, memory, disk, network and (with the ``gpu``
extra, nvidia-ml-py) GPU utilisation and memory.

Collected with MLflow's own monitors (``mlflow.system_metrics``), named as MLflow names them
(``system/<node>/cpu_utilization_percentage``, ..., so the UI's "System metrics" tab shows them,
one group per node), but sent through our ``RunLogger``: an MLflow outage queues them like every
other metric instead of stopping the sampler, and relayed servers work.  One sampler per node
(the node's first Train worker), so a user sees in the UI which trial's node starved.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from platform.compat import mlflow_monitor


def monitors() -> list:
    """MLflow's monitors for this machine: CPU and memory, disk, network, and a GPU's if
    ``nvidia-ml-py`` finds one."""
    import psutil


    psutil.cpu_percent()  # primes the CPU counter: the first sample then covers the first interval
    found = [mlflow_monitor(name)() for name in ("CPUMonitor", "DiskMonitor", "NetworkMonitor")]
    try:
        found.append(mlflow_monitor("GPUMonitor")())
    except Exception:  # noqa: BLE001 - no nvidia-ml-py, no driver or no GPU: CPU metrics only
        pass
    return found


class SystemMetrics:
    """Samples this node every ``interval`` seconds and logs the mean of ``samples`` samples
    as one step; ``stop`` logs what was sampled since the last step, so a short run has one."""

    def __init__(self, logger, node: str, interval: float = 10.0, samples: int = 1,
                 first_step: int | Callable[[], int] = 0):
        """``first_step``: the step of the first sample, or what finds it (asked in the sampler's
        thread, like the monitors are made: MLflow's monitors import MLflow, which would hold up
        a Train worker's start-up by a second or two; in the thread it overlaps training)."""
        self.logger, self.interval, self.samples = logger, interval, samples
        self.prefix = f"system/{node}/"
        self.monitors: list = []
        self.first_step, self.step, self.pending = first_step, 0, 0
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nmt-system-metrics", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> SystemMetrics:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        if not self._ready.is_set():  # stopped before the thread got going (or it is stuck): nothing to say
            return
        with self._lock:
            if not self.pending:
                self._sample()
            self._publish()

    def _setup(self) -> None:
        self.monitors = monitors()
        self.step = self.first_step() if callable(self.first_step) else self.first_step
        self._ready.set()

    def _loop(self) -> None:
        self._setup()
        while not self._stop.wait(self.interval):
            with self._lock:
                self._sample()
                if self.pending >= self.samples:
                    self._publish()

    def _sample(self) -> None:
        for monitor in self.monitors:
            monitor.collect_metrics()
        self.pending += 1

    def _publish(self) -> None:
        metrics = {}
        for monitor in self.monitors:
            metrics.update(monitor.aggregate_metrics())
            monitor.clear_metrics()
        if metrics:
            self.logger.metrics({self.prefix + name: float(value) for name, value in metrics.items()}, step=self.step)
            self.step += 1
        self.pending = 0


def node_sampler(logger, node: str, interval: float = 10.0) -> SystemMetrics:
    """A started sampler for ``node`` that continues the steps this run has (a restarted worker
    group appends to its curves instead of writing over them)."""
    def first_step() -> int:
        return max(logger.metric_steps(f"system/{node}/cpu_utilization_percentage") or set(), default=-1) + 1

    return SystemMetrics(logger, node, interval, first_step=first_step).start()
