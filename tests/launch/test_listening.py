"""A local cluster exposes nothing: every socket Ray listens on is on loopback (a real listing)."""

import os
import subprocess

from platform.tracking.relay import start_relay


def descendants(root: int) -> set[int]:
    """Every process below ``root`` (from /proc: Ray's GCS, raylet and agents are children of
    the process that started the cluster, its workers children of the raylet)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:  # ended meanwhile
                continue
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def listening(pids: set[int]) -> list[tuple[str, str]]:
    """(local address, process) of every listening TCP socket owned by one of ``pids``, from ``ss``."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30, check=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        owners = {int(part.split("=")[1]) for part in line.replace(",", " ").replace(")", " ").split()
                  if part.startswith("pid=")}
        if owners & pids:
            found.append((fields[3], line.split("users:")[-1]))
    return found


def test_a_local_cluster_listens_on_loopback_only(ray_cluster, tmp_path):
    ray = ray_cluster
    start_relay(f"sqlite:///{tmp_path}/mlflow.db")  # an actor, as every training starts one

    @ray.remote
    def where() -> int:
        return os.getpid()

    assert ray.get([where.remote() for _ in range(4)])  # task workers up too
    ray_processes = descendants(os.getpid())
    sockets = listening(ray_processes)
    assert len(sockets) >= 5, sockets  # the GCS, the raylet, its agents, the dashboard, the workers
    exposed = [(address, owner) for address, owner in sockets
               if not address.startswith(("127.0.0.1:", "[::1]:", "[::ffff:127.0.0.1]:"))]
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_two_worker_training_listens_on_loopback_only_and_logs_one_run_with_workers_2(ray_cluster, demo_dataset,
                                                                                      tmp_path):
    """Every listening socket of the cluster's processes, sampled all through a real 2-worker
    DDP training: torch's store on rank 0 and gloo's pairs included, none beyond loopback (Ray
    Train's own set-up served the store on ``*:port``).  The training is one MLflow run with
    ``workers`` 2, the node's system metrics (sampled by its first worker only) and its datasets."""
    import threading
    import time

    from helpers import runs_of

    import platform as _platform
    from platform import train

    seen: set[tuple[str, str]] = set()
    outcome = {}

    def training():
        outcome["code"] = train.main(["--model", "transformer", "--smoke", "--workers", "2", "--cpus-per-worker", "1",
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
    exposed = sorted((address, owner) for address, owner in seen
                     if not address.startswith(("127.0.0.1:", "[::1]:", "[::ffff:127.0.0.1]:")))
    assert not exposed, f"listening beyond loopback: {exposed}"
    _, runs = runs_of(f"sqlite:///{tmp_path}/mlflow.db", "ddp")
    assert len(runs) == 1
    assert runs[0].data.params["workers"] == "2" and runs[0].info.status == "FINISHED"
    system = {name for name in runs[0].data.metrics if name.startswith("system/")}  # one node: one sampler
    assert f"system/{_platform.node()}/cpu_utilization_percentage" in system
    assert {name.split("/")[1] for name in system} == {_platform.node()}
    contexts = {t.value for i in runs[0].inputs.dataset_inputs for t in i.tags if t.key == "mlflow.data.context"}
    assert contexts == {"train", "dev", "test"}  # the Dataset column of MLflow's runs table
