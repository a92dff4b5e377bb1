"""System metrics: MLflow's own monitors, sent through RunLogger into a real store."""

import time

import pytest
from mlflow.tracking import MlflowClient

from platform.tracking import runs
from platform.tracking.logger import RunLogger
from platform.tracking.system import SystemMetrics, node_sampler


@pytest.mark.timed
def test_the_sampler_logs_cpu_memory_disk_and_network_steps_under_the_node(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id = runs.start_run(uri, "system", "r", {}, {}, "")
    logger = RunLogger(uri, run_id)
    sampler = SystemMetrics(logger, "node-a", interval=0.2).start()
    busy_until = time.monotonic() + 1.5
    while time.monotonic() < busy_until:  # some CPU to measure
        sum(i * i for i in range(10_000))
    sampler.stop()
    assert logger.close() == []
    client = MlflowClient(uri)
    names = set(client.get_run(run_id).data.metrics)
    for name in ("cpu_utilization_percentage", "system_memory_usage_megabytes", "disk_usage_percentage",
                 "network_receive_megabytes"):
        assert f"system/node-a/{name}" in names, names
    cpu = client.get_metric_history(run_id, "system/node-a/cpu_utilization_percentage")
    assert len(cpu) >= 4 and [m.step for m in cpu] == list(range(len(cpu)))
    assert max(m.value for m in cpu) > 0.0  # the busy loop was measured
    # a restarted worker group continues the steps instead of writing over them
    again = RunLogger(uri, run_id)
    node_sampler(again, "node-a", interval=60).stop()  # a short run: one step, logged at stop
    assert again.close() == []
    steps = [m.step for m in client.get_metric_history(run_id, "system/node-a/cpu_utilization_percentage")]
    assert steps == list(range(len(cpu) + 1))
