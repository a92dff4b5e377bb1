"""The autoscaling shape of ``ray_cluster.yaml`` on a local fake cluster: Ray's own
``fake_multinode`` provider (``RAY_FAKE_CLUSTER=1 ray start --head --autoscaling-config ...``)
with the file's node types, their resources as AWS reports them for the instance types, and
their min/max counts.  The head starts with no worker; a sweep that asks for a GPU per Train
worker makes Ray's autoscaler add a ``gpu_worker`` node, and the trial runs there.  (The idle
node's release after the idle timeout is not asserted: here it did not happen within 3
minutes of a 12 s timeout; docs/cluster.md, known limits.)

The session's own local cluster is shut down for this test (``own_cluster``): never two
clusters on the machine at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from helpers import end_ray_processes_under, free_port, runs_of

pytestmark = pytest.mark.slow

# what EC2 reports for the file's instance types (vCPUs, GPUs): the resources Ray gives those nodes
INSTANCE_RESOURCES = {"m6i.2xlarge": {"CPU": 8}, "g5.2xlarge": {"CPU": 8, "GPU": 1}}
IDLE_MINUTES = 0.2
FAKE_HEAD_TYPE = "ray.head.default"  # the name Ray's fake_multinode provider gives its head node

ALIVE = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR")
print(json.dumps([n["Resources"] for n in ray.nodes() if n["Alive"]]))
"""


def fake_cluster_config(port: int) -> dict:
    """``ray_cluster.yaml``'s node types and counts on the fake_multinode provider."""
    real = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    types = {}
    for name, node_type in real["available_node_types"].items():
        resources = {**INSTANCE_RESOURCES[node_type["node_config"]["InstanceType"]], **node_type["resources"]}
        name = FAKE_HEAD_TYPE if name == real["head_node_type"] else name
        types[name] = {"resources": resources, "node_config": {}, "max_workers": node_type.get("max_workers", 0),
                       "min_workers": node_type.get("min_workers", 0)}
    return {"cluster_name": "fake-" + real["cluster_name"], "max_workers": real["max_workers"],
            "idle_timeout_minutes": IDLE_MINUTES, "upscaling_speed": 1.0,
            "provider": {"type": "fake_multinode", "gcs_address": f"127.0.0.1:{port}", "use_node_id_as_ip": True,
                         "disable_node_updaters": True, "disable_launch_config_check": True},
            "auth": {"ssh_user": "ubuntu"}, "available_node_types": types, "head_node_type": FAKE_HEAD_TYPE,
            "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
            "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [], "setup_commands": [],
            "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
            "worker_start_ray_commands": []}


def test_a_sweep_scales_the_files_gpu_workers_up_from_zero(own_cluster, demo_dataset, tmp_path):
    port = free_port()
    config_path = tmp_path / "fake_cluster.yaml"
    config = fake_cluster_config(port)
    config_path.write_text(yaml.safe_dump(config))
    temp_dir = Path(tempfile.mkdtemp(prefix="nmt-fake-", dir="/tmp"))
    env = {**os.environ, "RAY_FAKE_CLUSTER": "1", "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": ""}
    head = config["available_node_types"][config["head_node_type"]]["resources"]
    ray = str(Path(sys.executable).parent / "ray")
    address = f"127.0.0.1:{port}"

    def alive() -> list[dict]:
        found = subprocess.run([sys.executable, "-c", ALIVE, address], env=env, capture_output=True, text=True, timeout=120)
        assert found.returncode == 0, found.stderr[-2000:]
        return json.loads(found.stdout.strip().splitlines()[-1])

    try:
        subprocess.run([ray, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                        f"--num-cpus={int(head['CPU'])}", "--num-gpus=0", f"--temp-dir={temp_dir}",
                        f"--autoscaling-config={config_path}", "--dashboard-host=127.0.0.1",
                        f"--dashboard-port={free_port()}", "--disable-usage-stats"],
                       env=env, check=True, capture_output=True, timeout=180)
        assert [n.get("GPU", 0) for n in alive()] == [0]  # the head alone, as on a fresh ray up
        sweep = subprocess.run(
            [sys.executable, "-m", "platform.tune", "--space", "dbsa", "--smoke", "--data", str(demo_dataset),
             "--num-trials", "1", "--gpus-per-worker", "1", "--address", address,
             "--experiment", "autoscale", "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db",
             "--storage-path", str(tmp_path / "runs"), "--set", "eval.max_sentences=8"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
        assert "0 trial(s) fit; the others wait for Ray's autoscaler to add nodes" in sweep.stdout
        _, runs = runs_of(f"sqlite:///{tmp_path}/mlflow.db", "autoscale")
        trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
        assert len(trials) == 1 and all(r.info.status == "FINISHED" for r in trials)
        assert {r.data.tags["gpu_ids"] for r in trials} == {"0"}  # each on a GPU worker the autoscaler added
        assert sorted(n.get("GPU", 0) for n in alive()) == [0, 1]  # the head and the one gpu_worker it added
    finally:
        end_ray_processes_under(temp_dir)
