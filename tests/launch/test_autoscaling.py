"""The autoscaling shape of ``ray_cluster.yaml`` on a local fake cluster, with the sweep run
the way docs/cluster.md tells users to: as a Ray job through the Jobs API.

Ray's own ``fake_multinode`` provider (``RAY_FAKE_CLUSTER=1 ray start --head
--autoscaling-config ...``) gets the file's node types, their resources as AWS reports them
for the instance types, and their min/max counts.  The head starts with no worker; a sweep
submitted as a job asks for a GPU per Train worker, Ray's autoscaler adds a ``gpu_worker``
node, and the trials run there.  MLflow and the live Optuna study are on the cluster's
PostgreSQL, as ``ray_cluster.yaml`` sets them up (the study's URL with a planted password).  The
head is then restarted mid-sweep (every Ray process of the cluster ended, the job's driver with
them); the same command with ``--resume``, submitted again, finishes the sweep (a trial the
restart interrupted resumes its own run, or, if Tune had not saved it yet, its run is closed as
lost), ``ray job logs -f`` follows it to its end, and the GPU node goes within the file's idle
timeout once the sweep is over.  This is the suite's one kill-and-resume sweep on Ray; every
other searcher and scheduler resumes through the same save and restore without a cluster
(``test_faults.py::test_each_searcher_and_scheduler_resumes_where_the_killed_driver_saved_it``).

The session's own local cluster is shut down for this test (``own_cluster``): never two
clusters on the machine at once."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from helpers import ROOT, ListenerWatch, end_ray_processes_under, free_port, rungs, runs_of, saved_state, wait_for
from servers import MlflowServer

pytestmark = pytest.mark.slow

# what EC2 reports for the file's instance types (vCPUs, GPUs): the resources Ray gives those nodes
INSTANCE_RESOURCES = {"m6i.2xlarge": {"CPU": 8}, "g5.2xlarge": {"CPU": 8, "GPU": 1}}
IDLE_MINUTES = 0.2
FAKE_HEAD_TYPE = "ray.head.default"  # the name Ray's fake_multinode provider gives its head node
PLANTED = "pl4nted-S3cret"  # a password the sweep's study storage URL carries

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


def test_a_sweep_submitted_as_a_ray_job_scales_gpu_workers_from_zero_resumes_after_a_head_restart_and_lets_them_go(
        own_cluster, demo_dataset, postgres, tmp_path, capsys):
    import optuna
    import sqlalchemy
    from ray.job_submission import JobStatus, JobSubmissionClient

    port, dashboard_port = free_port(), free_port()
    config_path = tmp_path / "fake_cluster.yaml"
    config = fake_cluster_config(port)
    config_path.write_text(yaml.safe_dump(config))
    temp_dir = Path(tempfile.mkdtemp(prefix="nmt-fake-", dir="/tmp"))
    # every process of the fake cluster on 127.0.0.1: as single-machine Ray (the setting Ray reads
    # on macOS and Windows), Ray keeps a loopback node address instead of replacing it by the
    # machine's network address; the autoscaler's monitor starts the fake nodes with it too
    # the head's PostgreSQL behind MLflow and the live study, as the cluster file exports them before
    # ``ray start`` (with a password: the server trusts local connections, so any will do); a planted
    # secret that neither console, the store nor the sweep's files may show (platform.redaction)
    database = postgres.database("autoscale")
    study_storage = postgres.database("autoscale_optuna").replace("://nmt@", f"://nmt:{PLANTED}@")
    (tmp_path / "mlflow").mkdir()
    server = MlflowServer(tmp_path / "mlflow", backend=database)
    env = {**os.environ, "RAY_FAKE_CLUSTER": "1", "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": "",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "NMT_STUDY_STORAGE": study_storage}
    head = config["available_node_types"][config["head_node_type"]]["resources"]
    ray = str(Path(sys.executable).parent / "ray")
    dashboard = f"http://127.0.0.1:{dashboard_port}"
    sweep = [sys.executable, "-m", "platform.tune", "--space", "dbsa", "--smoke", "--data", str(demo_dataset),
             "--num-trials", "2", "--max-concurrent", "1", "--gpus-per-worker", "1", "--address", "auto",
             "--experiment", "autoscale", "--name", "autoscale-1", "--tracking-uri", "URI",
             "--storage-path", str(tmp_path / "runs"), "--set", "eval.max_sentences=8"]

    def start_head():
        subprocess.run([ray, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                        f"--num-cpus={int(head['CPU'])}", "--num-gpus=0", f"--temp-dir={temp_dir}",
                        f"--autoscaling-config={config_path}", "--dashboard-host=127.0.0.1",
                        f"--dashboard-port={dashboard_port}", "--disable-usage-stats"],
                       env=env, check=True, capture_output=True, timeout=180)
        return JobSubmissionClient(dashboard)

    def gpus_alive() -> list[float]:
        from ray.util.state import list_nodes  # Ray's state API, through the head's dashboard

        nodes = list_nodes(address=dashboard, detail=True)  # every node, dead ones too (a filter reads as cut off)
        return sorted(node.resources_total.get("GPU", 0) for node in nodes if node.state == "ALIVE")

    def trials(status: str | None = None) -> list:
        _, runs = runs_of(server.uri, "autoscale")
        return [r for r in runs if r.data.tags.get("mlflow.parentRunId") and status in (None, r.info.status)]

    # as ``ray job submit -- bash -c "cd ... && python -m platform.tune ..."``
    def submit(client, command: list[str]) -> str:
        return client.submit_job(entrypoint=f"cd {shlex.quote(str(ROOT))} && {shlex.join(command)}")

    watch = ListenerWatch(str(temp_dir)).start()
    server.start()
    sweep[sweep.index("URI")] = server.uri
    try:
        client = start_head()
        assert gpus_alive() == [0]  # the head alone, as on a fresh ray up
        first = submit(client, sweep)
        wait_for(lambda: trials("FINISHED") and trials("RUNNING"), 420, "the job's second trial started", poll=2)
        assert client.get_job_status(first) == JobStatus.RUNNING
        assert gpus_alive() == [0, 1]  # the gpu_worker the autoscaler added for it

        end_ray_processes_under(temp_dir)  # the head goes down mid-sweep: every node and the job's driver
        client = start_head()
        assert gpus_alive() == [0]
        again = submit(client, [*sweep, "--resume"])
        follow = subprocess.run([ray, "job", "logs", "--address", dashboard, "-f", again],
                                env=env, capture_output=True, text=True, timeout=600)
        logs = follow.stdout + follow.stderr
        assert client.get_job_status(again) == JobStatus.SUCCEEDED, logs[-4000:]
        assert "the others wait for Ray's autoscaler to add nodes" in logs  # the head alone has no GPU
        assert "best: trial" in logs  # followed to the sweep's last lines

        # the trial the restart interrupted resumed its own run; or, where Tune had not saved it
        # yet, its run was closed as lost and another trial ran in its place: none left RUNNING
        done = trials("FINISHED")
        assert len(done) == 2 and len({r.data.tags["trial_id"] for r in done}) == 2, [r.info.run_name for r in done]
        assert {r.data.tags["gpu_ids"] for r in done} == {"0"}  # each on a GPU worker the autoscaler added
        rest = [r for r in trials() if r.info.status != "FINISHED"]
        assert all(r.info.status == "FAILED" and r.data.tags.get("lost") == "true" for r in rest), \
            [(r.info.run_name, r.info.status, r.data.tags.get("error")) for r in rest]
        _, runs = runs_of(server.uri, "autoscale")
        (parent,) = [r for r in runs if r.data.tags.get("sweep_parent") == "autoscale-1"]
        assert parent.info.status == "FINISHED" and {r.data.tags["mlflow.parentRunId"] for r in trials()} == {
            parent.info.run_id}
        assert (parent.data.params["scheduler"], parent.data.params["searcher"]) == ("asha", "optuna-tpe")
        # the live study kept its history across the restart: each finished trial once, with its final
        # state (a trial lost before Tune saved it: FAIL); ASHA's rungs survived it: every finished
        # trial of both sessions met the first one
        states = [t.state.name for t in optuna.load_study(study_name="autoscale-1", storage=study_storage).trials]
        assert len([s for s in states if s in ("COMPLETE", "PRUNED")]) == 2 and set(states) <= {
            "COMPLETE", "PRUNED", "FAIL"}, states
        _, scheduler = saved_state(str(tmp_path / "runs" / "autoscale-1"))
        assert {r.data.tags["trial_id"] for r in done} <= rungs(scheduler)[1]
        # all of it in PostgreSQL, nothing in a file beside the server, the planted password nowhere
        assert not (tmp_path / "mlflow" / "mlflow.db").exists() and not (tmp_path / "runs" / "autoscale-1" /
                                                                          "optuna.db").exists()
        engine = sqlalchemy.create_engine(database)
        with engine.connect() as connection:
            stored = connection.execute(sqlalchemy.text("select count(*) from runs")).scalar()
            recorded = connection.execute(sqlalchemy.text(
                "select value from params union all select value from tags "
                "union all select dataset_source from datasets")).scalars().all()
        engine.dispose()
        assert stored == len(runs) and parent.data.params["study_storage"].startswith("postgresql://nmt:***@")
        assert not [value for value in recorded if PLANTED in value] and PLANTED not in logs
        assert PLANTED not in client.get_job_info(again).entrypoint  # what Ray keeps of the job (and logs)
        leaks = [path for path in tmp_path.rglob("*") if path.is_file() and PLANTED.encode() in path.read_bytes()]
        assert not leaks and PLANTED not in capsys.readouterr().out, leaks
        idle_s = IDLE_MINUTES * 60
        wait_for(lambda: gpus_alive() == [0], idle_s + 60, f"the idle gpu_worker released ({idle_s:g} s idle timeout)",
                 poll=1)
        watch.stop()  # every node, the job's driver and its trials: on loopback only
        assert any("RayTrainWo" in owner for _, owner in watch.seen), sorted(watch.seen)[:20]
        assert not watch.exposed(), watch.exposed()
    finally:
        watch.stop()
        end_ray_processes_under(temp_dir)
        server.stop()
