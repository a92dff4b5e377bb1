"""A local cluster exposes nothing: every socket Ray listens on is on loopback (a real listing)."""

import os
import subprocess

from helpers import LOOPBACK, SECRET, descendants, listening

from platform.tracking.relay import held_relay


def test_a_local_cluster_listens_on_loopback_only(ray_cluster, tmp_path):
    ray = ray_cluster
    with held_relay(f"sqlite:///{tmp_path}/mlflow.db"):  # an actor, as every training starts one
        loopback_only(ray)


def loopback_only(ray) -> None:
    """Every socket the cluster's processes listen on is on loopback."""
    @ray.remote
    def where() -> int:
        return os.getpid()

    assert ray.get([where.remote() for _ in range(4)])  # task workers up too
    ray_processes = descendants(os.getpid())
    sockets = listening(ray_processes)
    assert len(sockets) >= 5, sockets  # the GCS, the raylet, its agents, the dashboard, the workers
    exposed = [(address, owner) for address, owner in sockets if not address.startswith(LOOPBACK)]
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_two_worker_training_listens_on_loopback_only_and_logs_one_run_with_workers_2(ray_cluster, demo_dataset,
                                                                                      tmp_path):
    """Every listening socket of the cluster's processes, sampled all through a real 2-worker
    DDP training of DBSA: torch's store on rank 0 and gloo's pairs included, none beyond loopback
    (Ray Train's own set-up served the store on ``*:port``).  The training is one MLflow run with
    ``workers`` 2, the node's system metrics (sampled by its first worker only), its datasets,
    DBSA's parsing scores and attention plot, and no trace of the environment's secret; Ray Train
    ran it without its preemption watcher (a local cluster has nothing to reclaim).  (What every
    smoke run through Ray logs: tests/test_train.py.)"""
    import threading
    import time

    from helpers import runs_of

    import platform as _platform
    from platform import train

    seen: set[tuple[str, str]] = set()
    outcome = {}

    def training():
        outcome["code"] = train.main(["--model", "dbsa", "--smoke", "--workers", "2", "--cpus-per-worker", "1",
                                      "--data", str(demo_dataset), "--experiment", "ddp",
                                      "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db",
                                      "--storage-path", str(tmp_path / "runs"), "--max-failures", "0"])

    thread = threading.Thread(target=training)
    thread.start()
    while thread.is_alive():
        seen.update(listening(descendants(os.getpid())))
        time.sleep(0.5)  # light: on 2 cores a busier loop slows the workers' start past Ray's timeout
    assert outcome.get("code") == 0
    train_workers = {address for address, owner in seen if "RayTrainWo" in owner}
    assert train_workers, f"no Train worker was seen listening: {sorted(seen)}"  # the samples covered training
    exposed = sorted((address, owner) for address, owner in seen if not address.startswith(LOOPBACK))
    assert not exposed, f"listening beyond loopback: {exposed}"
    client, runs = runs_of(f"sqlite:///{tmp_path}/mlflow.db", "ddp")
    assert len(runs) == 1
    assert runs[0].data.params["workers"] == "2" and runs[0].info.status == "FINISHED"
    system = {name for name in runs[0].data.metrics if name.startswith("system/")}  # one node: one sampler
    assert f"system/{_platform.node()}/cpu_utilization_percentage" in system
    assert {name.split("/")[1] for name in system} == {_platform.node()}
    contexts = {t.value for i in runs[0].inputs.dataset_inputs for t in i.tags if t.key == "mlflow.data.context"}
    assert contexts == {"train", "dev", "test"}  # the Dataset column of MLflow's runs table
    run = runs[0]
    assert run.data.params["model"] == "dbsa"
    assert "dev_uas_enc" in run.data.metrics and "dev_uas_dec" in run.data.metrics
    assert "plots/parse_attention.png" in {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    # the environment (here a fake secret the session exported before starting Ray) is never logged
    config_yaml = client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))
    logged = [*run.data.params.values(), *run.data.tags.values(), open(config_yaml).read()]
    assert not any(SECRET in text for text in logged)
    # a local cluster's training runs without Ray Train's preemption watcher (nothing there can be
    # reclaimed), with the controller's other actors
    from ray.util.state import list_actors

    context = ray_cluster.get_runtime_context()
    classes = {a.class_name for a in list_actors(address=context.gcs_address, limit=10_000,
                                                 filters=[("job_id", "=", context.get_job_id())],
                                                 raise_on_missing_output=False)}
    assert "TrainController" in classes and "PreemptionWatcher" not in classes, classes


JOIN = """
import sys
import ray
from platform.launch.cluster import start_ray
start_ray(sys.argv[1], log_to_driver=False)
print("joined", ray.get(ray.remote(lambda: 1).remote()))
"""


def test_the_session_cluster_runs_with_rays_token_authentication(ray_cluster, tmp_path):
    """The suite's cluster runs as a user's local one does by default, with Ray's token
    authentication: a driver that presents another token is refused, and so is a request to the
    dashboard (where jobs are submitted) without one; the session's token joins."""
    import sys
    import threading
    import urllib.error
    import urllib.request

    from helpers import ROOT, wait_for

    ray = ray_cluster
    assert os.environ["RAY_AUTH_MODE"] == "token"
    gcs = ray.get_runtime_context().gcs_address
    wrong = tmp_path / "auth_token"
    wrong.write_text("0" * 64)

    def driver(token_path: str) -> subprocess.Popen:
        env = {**os.environ, "RAY_AUTH_TOKEN_PATH": token_path, "PYTHONPATH": str(ROOT)}
        return subprocess.Popen([sys.executable, "-c", JOIN, gcs], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    refused = driver(str(wrong))  # Ray's driver retries for about 20 s: its first refusal is enough
    lines: list[str] = []
    reader = threading.Thread(target=lambda: [lines.append(line) for line in refused.stderr
                                              if not any("InvalidAuthToken" in seen for seen in lines)], daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("InvalidAuthToken" in line for line in lines) or refused.poll() is not None, 60,
                 "the refused driver's first error")
        assert any("InvalidAuthToken" in line for line in lines), "".join(lines)[-2000:]
    finally:
        refused.kill()
        out = refused.stdout.read()
        refused.wait(timeout=60)
    assert "joined" not in out
    joined = driver(os.environ["RAY_AUTH_TOKEN_PATH"])
    out, err = joined.communicate(timeout=120)
    assert joined.returncode == 0 and "joined 1" in out, err[-2000:]
    dashboard = ray_cluster._private.worker.global_worker.node.address_info["webui_url"]
    try:
        urllib.request.urlopen(f"http://{dashboard}/api/jobs/", timeout=30)
        status = 200
    except urllib.error.HTTPError as error:
        status = error.code
    assert status == 401
