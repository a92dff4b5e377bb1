"""A Ray cluster whose worker node cannot see the head's files, as on ``ray up`` machines that
share no disk: two real nodes on this machine, the second started in its own mount namespace
in which the checkout (and its virtual environment's path, bound back alone), pytest's
temporary directories (every test's working directory, MLflow store and demo corpus) are
hidden under empty tmpfs mounts.  The head has no CPUs, so every trial and Train worker runs on
the other node.  One shared directory outside those stands for a shared file system, and a real
S3-compatible server (moto) on loopback for object storage.  The module's last tests add a third,
plain node (it sees every file, and has one logical GPU): a sweep spreads over both worker nodes,
and trials share the GPU.

The pytest session's own local cluster is shut down for this module and started again after
it: never two clusters on the machine at once."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from helpers import ROOT, ListenerWatch, end_ray_processes_under, free_port, require_module, runs_of
from mlflow.tracking import MlflowClient
from ray_private import ray_command
from servers import MotoServer

BUCKET = "nmt"
pytestmark = pytest.mark.slow


def hidden_node_script(hide: list[Path], keep: Path, address: str, num_cpus: int, read_only: Path | None = None) -> str:
    """The worker node's start: in a private mount namespace, ``read_only`` made read-only, empty
    tmpfs over every hidden directory, the interpreter's environment bound back at its own path
    if it lay inside one."""
    prefix = Path(sys.prefix).resolve()
    lines = ["set -euo pipefail"]
    if read_only is not None:
        lines += [f"mount --bind {read_only} {read_only}", f"mount -o remount,bind,ro {read_only}"]
    inside = any(prefix.is_relative_to(directory) for directory in hide)
    if inside:
        lines.append(f"mount --bind {prefix} {keep}")
    lines += [f"mount -t tmpfs -o size=1m,mode=755 nmt-hidden {directory}" for directory in hide]
    if inside:
        lines += [f"mkdir -p {prefix}", f"mount --bind {keep} {prefix}"]
    start = ray_command("start", f"--address={address}", f"--num-cpus={num_cpus}", "--disable-usage-stats")
    lines.append(f"exec {shlex.join(start)}")
    return "\n".join(lines)


# the probes join as the platform's commands do (``start_ray``: the cluster's loopback address as given)
PROBE = textwrap.dedent("""
    import json, os, sys, time
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    from platform.launch.cluster import start_ray
    start_ray(sys.argv[1], log_to_driver=False)
    deadline = time.time() + 120
    while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.time() < deadline:
        time.sleep(0.5)
    head = ray.get_runtime_context().get_node_id()
    other = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head][0]
    sees = ray.get(ray.remote(num_cpus=0)(lambda paths: {p: os.path.exists(p) for p in paths}).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=other, soft=False)).remote(sys.argv[2:]))
    print(json.dumps({"head": head, "worker": other, "sees": sees}))
""")


NODES = textwrap.dedent("""
    import json, sys, time
    import ray
    from platform.launch.cluster import start_ray
    start_ray(sys.argv[1], log_to_driver=False)
    deadline = time.time() + 120
    while len([n for n in ray.nodes() if n["Alive"]]) < int(sys.argv[2]) and time.time() < deadline:
        time.sleep(0.5)
    print(json.dumps([n["NodeID"] for n in ray.nodes() if n["Alive"]]))
""")


class HiddenNodeCluster:
    """``ray start --head --num-cpus 0`` here, and a 4-CPU worker node that sees none of ``hide``;
    every node on 127.0.0.1 (``ray_command``)."""

    def __init__(self, hide: list[Path], env: dict[str, str], read_only: Path | None = None):
        self.hide, self.env, self.read_only = hide, env, read_only
        self.keep = Path(tempfile.mkdtemp(prefix="nmt-keep-venv-"))
        # this cluster's own temporary directory: both nodes' processes name it (the worker node
        # takes it from the head), so stop() ends exactly them, and no other Ray on the machine
        self.temp_dir = Path(tempfile.mkdtemp(prefix="nmt-ray-", dir="/tmp"))  # short: Ray's socket paths
        self.address = f"127.0.0.1:{free_port()}"
        self.head = self.worker = ""
        self.node_cache = Path(tempfile.mkdtemp(prefix="nmt-node-cache-"))  # the worker node's own (data.mapped)

    def start(self) -> dict:
        port = self.address.rsplit(":", 1)[1]
        subprocess.run(ray_command("start", "--head", f"--port={port}", "--num-cpus=0", f"--temp-dir={self.temp_dir}",
                                   "--dashboard-host=127.0.0.1", f"--dashboard-port={free_port()}",
                                   "--disable-usage-stats"),
                       env=self.env, check=True, capture_output=True, timeout=180)
        script = hidden_node_script(self.hide, self.keep, self.address, num_cpus=4, read_only=self.read_only)
        started = subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", script],
                                 env={**self.env, "NMT_DATA_CACHE": str(self.node_cache)}, capture_output=True,
                                 text=True, timeout=180)
        assert started.returncode == 0, started.stderr[-3000:]
        marker = self.hide[-1] / "visible-from-the-head"
        marker.write_text("the worker node must not see this\n")
        looked_for = [ROOT / "pyproject.toml", ROOT / "platform", marker]
        assert all(path.exists() for path in looked_for)  # here, on the head
        probe = subprocess.run([sys.executable, "-c", PROBE, self.address, *map(str, looked_for)],
                               env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=180)
        assert probe.returncode == 0, probe.stderr[-3000:]
        found = json.loads(probe.stdout.strip().splitlines()[-1])
        self.head, self.worker = found["head"], found["worker"]
        return found["sees"]

    def add_plain_node(self, num_cpus: int, num_gpus: int) -> str:
        """Another worker node, in this machine's own mount namespace (it sees every file, as the
        head does); returns its node id once the cluster has it."""
        subprocess.run(ray_command("start", f"--address={self.address}", f"--num-cpus={num_cpus}",
                                   f"--num-gpus={num_gpus}", "--disable-usage-stats"),
                       env=self.env, check=True, capture_output=True, timeout=180)
        nodes = subprocess.run([sys.executable, "-c", NODES, self.address, "3"], env=self.env, cwd=ROOT,
                               capture_output=True, text=True, timeout=180)
        assert nodes.returncode == 0, nodes.stderr[-3000:]
        (plain,) = set(json.loads(nodes.stdout.strip().splitlines()[-1])) - {self.head, self.worker}
        return plain

    def stop(self) -> None:
        """End this cluster's processes (by its temporary directory), not every Ray on the machine."""
        end_ray_processes_under(self.temp_dir)
        shutil.rmtree(self.keep, ignore_errors=True)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        shutil.rmtree(self.node_cache, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(own_module_cluster, tmp_path_factory):
    """The two-node cluster (and the S3 server) this module's tests share; the session's local
    cluster, if this process runs one, is shut down first (``own_module_cluster``)."""
    require_module("moto", "moto[server] (the dev extra) is the S3-compatible test server")
    can_unshare = shutil.which("unshare") is not None and os.geteuid() == 0 and subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, timeout=30).returncode == 0
    if not can_unshare:  # as for the shared data: a failure under CI, a skip on a laptop
        (pytest.fail if os.environ.get("CI", "").lower() == "true" else pytest.skip)(
            "needs root, unshare(1) and mount namespaces (CAP_SYS_ADMIN) for the worker node")
    s3 = MotoServer()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **s3.env()}  # the session's Ray token too
    env.pop("PYTHONPATH", None)
    s3.start(env)
    shared = Path(tempfile.mkdtemp(prefix="nmt-shared-storage-"))  # a shared file system: both nodes see it
    (shared / "read-only").mkdir()  # ... but this part of it is mounted read-only on the worker node
    hidden = HiddenNodeCluster([ROOT, tmp_path_factory.getbasetemp().resolve()], env, read_only=shared / "read-only")
    # every listener of the module's nodes and servers (PostgreSQL: its data directory's prefix)
    watch = ListenerWatch(str(hidden.temp_dir), "nmt-postgres-").start()
    try:
        s3.create_bucket(BUCKET)
        sees = hidden.start()
        yield {"cluster": hidden, "sees": sees, "shared": shared, "env": env, "s3": s3, "watch": watch}
    finally:
        watch.stop()
        hidden.stop()
        s3.stop()
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture(scope="module")
def plain_node(cluster) -> str:
    """The third node (3 CPUs, one logical GPU), added once for the module's last tests; its node id."""
    return cluster["cluster"].add_plain_node(num_cpus=3, num_gpus=1)


def cli(cluster, module: str, *args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -m platform.<module>`` from ``cwd`` (hidden from the worker node), as a user on the head would."""
    env = {**cluster["env"], "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", f"platform.{module}", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_worker_node_cannot_see_the_checkout_or_the_working_directories(cluster):
    assert cluster["sees"] and not any(cluster["sees"].values()), cluster["sees"]


def test_train_on_a_node_without_the_heads_files_ships_the_demo_corpus_and_loses_nothing_to_an_mlflow_outage(
        cluster, tmp_path, postgres):
    """The first run ships the user's local demo corpus to the worker node (through the shared
    storage) in the ``ray_cluster.yaml`` layout: the server on the head's loopback with its
    backend store in a real PostgreSQL database, so rank 0 (on the worker node) logs through the
    relay actor on the head.  The server is SIGKILLed once epoch 1 is logged and stays down across
    the run's end: the command ends without waiting for it (no rank, no driver held), the run's
    last records and its end kept in the shared storage's spool; restarted, ``report --replay``
    delivers them: every epoch once, the best checkpoint, the MLflow model and the kept weights in
    the store, the run FINISHED only then.  A second run reuses both copies."""
    from servers import MlflowOutage

    shared, hidden = cluster["shared"], cluster["cluster"]
    (tmp_path / "mlflow").mkdir()
    with MlflowOutage(tmp_path / "mlflow", seconds=None, backend=postgres.database("outage")) as outage:
        result = cli(cluster, "train", "--model", "transformer", "--smoke", "--workers", "2", "--cpus-per-worker", "1",
                     "--max-epochs", "4", "--set", "max_steps_per_epoch=20", "--average-last", "2", "--address",
                     hidden.address, "--storage-path", shared / "runs", "--tracking-uri", outage.uri, "--experiment",
                     outage.EXPERIMENT, "--max-failures", "0", cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-4000:]
        assert outage.server.process.poll() is not None  # it ended while the server was down: nothing waited
        assert "is kept in" in result.stdout  # the run's end, after what rank 0 kept there
        spool = shared / "runs" / "mlflow-spool"
        (kept,) = [path for path in spool.iterdir() if any(path.glob("*.json"))]
        outage.restart()
        replayed = cli(cluster, "report", "--replay", "--storage-path", shared / "runs", "--tracking-uri", outage.uri,
                       cwd=tmp_path)
        assert replayed.returncode == 0, replayed.stderr[-4000:]
        assert "are in the store now" in replayed.stdout and not any(spool.iterdir())
        run = outage.checked_run()  # every epoch once, some measured while the server was down; no rank held
        assert run.info.run_id == kept.name
        client = MlflowClient(outage.uri)
        assert [m.step for m in client.get_metric_history(run.info.run_id, "dev_bleu")] == [20, 40, 60, 80]
        (output,) = run.outputs.model_outputs
        assert [a.path for a in client.list_artifacts(run.info.run_id, "best")] == ["best/checkpoint.pt"]
        assert len(client.list_artifacts(run.info.run_id, "last_checkpoints")) == 2  # the kept weights
    assert "data: copied " in result.stdout and str(shared / "runs" / "datasets") in result.stdout
    assert run.data.tags["node_id"] == hidden.worker != hidden.head  # rank 0 ran (and logged) on the other node
    assert run.data.params["data"] == str(tmp_path / "data" / "demo")  # the user's dataset, not the copy
    from platform.tracking.runs import git_commit

    assert run.data.params["git_commit"] == git_commit() != "unknown"  # the driver's, though rank 0 had no .git
    # the MLflow model, built on the worker node and sent through the relay, in the server's artifact store here
    models = [path.parent for path in (tmp_path / "mlflow" / "artifacts").rglob("MLmodel")]
    assert [path for path in models if output.model_id in path.parts], models
    copies = list((shared / "runs" / "datasets").iterdir())
    assert len(copies) == 1 and (copies[0] / "COMMITTED").is_file() and (copies[0] / "train.parquet").is_file()
    # the worker node's two workers memory-map one node-local copy of the train split, built once
    (mapped,) = [p for p in hidden.node_cache.iterdir() if p.is_dir()]
    built = (mapped / "manifest.json").stat().st_mtime_ns
    # a second run reuses the dataset's copy on the shared storage and the node's copy of its train split
    again = cli(cluster, "train", "--model", "transformer", "--smoke", "--max-epochs", "1", "--address", hidden.address,
                "--storage-path", shared / "runs", "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db",
                "--experiment", "hidden", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "made by an earlier run" in again.stdout and len(list((shared / "runs" / "datasets").iterdir())) == 1
    assert [p for p in hidden.node_cache.iterdir() if p.is_dir()] == [mapped]
    assert (mapped / "manifest.json").stat().st_mtime_ns == built
    # a worker restarted on any other node maps the same arrays: a copy built here is identical
    from platform.data import dataset as ds
    from platform.data.mapped import node_local_train

    os.environ["NMT_DATA_CACHE"], previous = str(tmp_path / "here"), os.environ["NMT_DATA_CACHE"]
    try:
        here = node_local_train(str(copies[0]), ds.read_meta(copies[0])).directory
    finally:
        os.environ["NMT_DATA_CACHE"] = previous
    assert here.name == mapped.name
    assert {p.name: p.read_bytes() for p in here.iterdir()} == {p.name: p.read_bytes() for p in mapped.iterdir()}


def test_a_storage_path_the_worker_node_cannot_reach_is_one_line_before_any_training(cluster, tmp_path):
    hidden = cluster["cluster"]
    store = f"sqlite:///{tmp_path}/mlflow.db"
    result = cli(cluster, "train", "--model", "transformer", "--smoke", "--address", hidden.address,
                 "--tracking-uri", store, "--experiment", "blind", cwd=tmp_path)  # the default: runs/ here
    assert result.returncode != 0
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and f"--storage-path {tmp_path / 'runs'}: not reachable from node" in error[0], result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "data").exists()  # before the demo corpus was made
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("blind")
    assert experiment is None or client.search_runs([experiment.experiment_id]) == []  # nothing started


def test_a_storage_path_the_worker_node_can_only_read_is_one_line_before_any_training(cluster, tmp_path):
    """Seen from the worker node the probe file is there, but checkpoints could not be written."""
    hidden = cluster["cluster"]
    store = f"sqlite:///{tmp_path}/mlflow.db"
    storage = cluster["shared"] / "read-only"
    result = cli(cluster, "train", "--model", "transformer", "--smoke", "--address", hidden.address,
                 "--storage-path", storage, "--tracking-uri", store, "--experiment", "read-only", cwd=tmp_path)
    assert result.returncode != 0
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and f"--storage-path {storage}: not reachable from node" in error[0], result.stderr
    assert "cannot write" in error[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()  # refused before the demo corpus was prepared
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("read-only")
    assert experiment is None or client.search_runs([experiment.experiment_id]) == []  # nothing started


def test_a_sweep_on_data_in_s3_spreads_over_both_worker_nodes_and_its_files_go_to_s3_not_through_the_head(
        cluster, plain_node, tmp_path):
    """prepare --out s3://, then the ``ray_cluster.yaml`` layout with S3 (moto) as the storage and
    MLflow's artifact store (``--default-artifact-root s3://... --no-serve-artifacts``): a sweep
    reads that dataset where it is (credentials in its URI, as pyarrow accepts them: a planted
    secret nothing may show), two trials at once, each worker node fitting one (2.5 CPUs a
    worker), so one runs on the node that sees none of the head's files and one on the plain
    node; Ray Train's checkpoints, the trials' MLflow files and their models land in the bucket,
    uploaded by the worker nodes themselves; the relay on the head carries their metadata only
    (its byte count is logged on the sweep).  Then evaluate --run scores a trial on the test set
    read from s3://, and a dataset whose upload died midway is refused in one line."""
    import pyarrow.fs
    from servers import MlflowServer

    hidden, s3 = cluster["cluster"], cluster["s3"]
    data = f"s3://{BUCKET}/datasets/demo"
    prepared = cli(cluster, "prepare", "--data", "demo", "--demo-sizes", "2000,100,100", "--vocab-size", "600",
                   "--out", data, cwd=tmp_path)
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []  # nothing local: no directory named "s3:"
    refused = cli(cluster, "prepare", "--data", "demo", "--out", data, cwd=tmp_path)
    assert refused.returncode != 0 and "already exists; pass --overwrite" in refused.stderr
    secret = "pl4nted-S3cret"
    with_key = f"s3://testing:{secret}@{BUCKET}/datasets/demo"
    (tmp_path / "mlflow").mkdir()
    server = MlflowServer(tmp_path / "mlflow", artifact_root=f"s3://{BUCKET}/mlflow", env=cluster["env"])
    server.start()
    try:
        result = cli(cluster, "tune", "--space", "dbsa", "--smoke", "--num-trials", "2", "--address", hidden.address,
                     "--data", with_key, "--max-concurrent", "2", "--cpus-per-worker", "2.5", "--gpus-per-worker", "0",
                     "--name", "direct", "--search", "random", "--scheduler", "none",
                     "--storage-path", f"s3://{BUCKET}/sweeps", "--tracking-uri", server.uri,
                     "--experiment", "direct", cwd=tmp_path, timeout=900)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        client, found = runs_of(server.uri, "direct")
        trial_ids = [r.info.run_id for r in found if r.data.tags.get("mlflow.parentRunId")]
        models = [o.model_id for run_id in trial_ids for o in client.get_run(run_id).outputs.model_outputs]
        locations = [client.get_logged_model(model).artifact_location for model in models]
        evaluated = cli(cluster, "evaluate", "--run", trial_ids[0], "--test", f"{with_key}/conllu/test", "--src", "sov",
                        "--tgt", "svo", "--out", "out/test", "--tracking-uri", server.uri, cwd=tmp_path)
        assert evaluated.returncode == 0, evaluated.stderr[-3000:]
        assert "test_bleu" in client.get_run(trial_ids[0]).data.metrics
    finally:
        server.stop()
    assert len((tmp_path / "out" / "test.hyp").read_text().splitlines()) == 100
    assert "data: copied" not in result.stdout  # read where it is
    parent = next(r for r in found if r.data.tags.get("sweep_parent") == "direct")
    trials = [r for r in found if r.data.tags.get("mlflow.parentRunId")]
    assert parent.info.status == "FINISHED" and all(r.info.status == "FINISHED" for r in trials)
    assert {r.data.params["data"] for r in trials} == {f"s3://testing:***@{BUCKET}/datasets/demo"}
    # both at once, one on each worker node (neither node fits two): trials ran on both, none on the head
    assert len(trials) == 2 and {r.data.tags["node_id"] for r in trials} == {hidden.worker, plain_node}
    assert {r.data.params["git_commit"] for r in trials} == {parent.data.params["git_commit"]} != {"unknown"}
    assert parent.data.metrics["relay_artifact_bytes"] == 0  # no file crossed to the head as bytes
    fs = pyarrow.fs.S3FileSystem(endpoint_override=s3.endpoint, access_key="testing", secret_key="testing",
                                 region="us-east-1")

    def files(prefix: str) -> list[str]:
        return [i.path for i in fs.get_file_info(pyarrow.fs.FileSelector(prefix, recursive=True, allow_not_found=True))]

    checkpoints = files(f"{BUCKET}/sweeps")
    for trial in trials:
        assert trial.info.artifact_uri.startswith(f"s3://{BUCKET}/mlflow/")
        logged = files(trial.info.artifact_uri[len("s3://"):])
        assert any(name.endswith("best/checkpoint.pt") for name in logged), logged
        assert any(name.endswith("config.yaml") for name in logged)
        assert any(f"direct-{trial.data.tags['trial_id']}" in name and name.endswith("checkpoint.pt")
                   for name in checkpoints)
    assert len(locations) == 2  # each trial's MLflow model (no scheduler: both ran to their end)
    for location in locations:
        assert location.startswith(f"s3://{BUCKET}/mlflow/") and any(
            name.endswith("MLmodel") for name in files(location[len("s3://"):]))
    # the secret: not on either console, in the MLflow store, the bucket or anything written here
    assert secret not in result.stdout + result.stderr + evaluated.stdout + evaluated.stderr
    leaks = [path for path in tmp_path.rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]
    in_bucket = [info.path for info in fs.get_file_info(pyarrow.fs.FileSelector(BUCKET, recursive=True))
                 if info.type == pyarrow.fs.FileType.File and secret.encode() in fs.open_input_file(info.path).read()]
    assert not leaks and not in_bucket, (leaks, in_bucket)
    # an upload that died midway (no COMMITTED marker) is refused in one line
    fs.delete_file(f"{BUCKET}/datasets/demo/COMMITTED")
    broken = cli(cluster, "train", "--model", "transformer", "--smoke", "--data", data, "--address", hidden.address,
                 "--storage-path", f"s3://{BUCKET}/runs", "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db",
                 "--experiment", "s3", cwd=tmp_path)
    assert broken.returncode != 0 and f"error: {data}: an incomplete upload" in broken.stderr


def test_two_trials_share_one_gpu_at_a_half_each_and_a_third_waits(cluster, plain_node, demo_dataset, tmp_path):
    """The plain node's one logical GPU (no CUDA here): Ray's accounting is what packs trials onto it."""
    hidden = cluster["cluster"]
    store = f"sqlite:///{tmp_path}/mlflow.db"
    result = cli(cluster, "tune", "--space", "dbsa", "--smoke", "--data", demo_dataset, "--address", hidden.address,
                 "--experiment", "gpu-packing", "--num-trials", "3", "--max-concurrent", "3",
                 "--gpus-per-worker", "0.5", "--cpus-per-worker", "0.5", "--search", "random", "--scheduler", "none",
                 "--max-epochs", "1", "--set", "eval.max_sentences=8", "--tracking-uri", store,
                 "--storage-path", cluster["shared"] / "gpu-packing", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "up to 2 at once" in result.stdout and "0.5 GPU per worker" in result.stdout  # what fits on one GPU
    _, runs = runs_of(store, "gpu-packing")
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    assert len(trials) == 3 and all(r.info.status == "FINISHED" for r in trials)
    assert {r.data.tags["node_id"] for r in trials} == {plain_node}  # the one node with a GPU
    # each rank 0 saw the GPU Ray assigned it (the only one, id 0) and trained on what it could drive
    assert {(r.data.tags["gpu_ids"], r.data.tags["cuda_visible_devices"]) for r in trials} == {("0", "0")}
    assert {r.data.params["gpus_per_worker"] for r in trials} == {"0.5"}
    spans = sorted((r.info.start_time, r.info.end_time) for r in trials)
    at_once = max(sum(start <= moment < end for start, end in spans) for moment, _ in spans)
    assert at_once == 2  # two trials on the one GPU at once
    assert spans[2][0] >= min(end for _, end in spans[:2])  # the third started once one of them had ended


def test_every_node_and_server_of_the_module_listened_on_loopback_only(cluster):
    """Sampled every second through all of the module's tests (the last one): the GCS, the
    raylets, agents and workers of the three nodes, the Train workers' process groups, the S3,
    MLflow and PostgreSQL servers; none on an address other than loopback."""
    watch = cluster["watch"]
    assert any("raylet" in owner for _, owner in watch.seen), sorted(watch.seen)[:20]  # the samples saw the nodes
    assert any("RayTrainWo" in owner for _, owner in watch.seen), sorted(watch.seen)[:20]  # ... and training
    assert not watch.exposed(), watch.exposed()
