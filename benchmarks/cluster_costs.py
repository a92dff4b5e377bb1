"""What a run costs the cluster's shared pieces, measured on the two-node setup of
``tests/launch/test_no_shared_disk.py`` (a head with no CPUs, a worker node that cannot see the
head's files, a shared directory as the storage, an MLflow server on the head's loopback):

* dataset bytes shipped: the local demo corpus's copy under ``--storage-path/datasets``;
* checkpoint bytes per epoch: what Ray Train writes to the storage, per epoch;
* MLflow calls per epoch per run: the server's access log, by endpoint, for a 2-worker run of
  ``--max-epochs`` epochs (system metrics every 10 s included).

    python -m benchmarks.cluster_costs [--size smoke|sweep|cpu] [--max-epochs 3]

Prints a Markdown table (for docs/cluster.md).  Needs root and unshare(1), like the tests.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the tests' folders first: test_no_shared_disk imports the tests' helpers and servers modules
sys.path[:0] = [str(ROOT / "tests" / "launch"), str(ROOT / "tests")]

from test_no_shared_disk import HiddenNodeCluster  # noqa: E402  (test infrastructure, reused)

from platform.tracking.store import SERVER_ENV  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=["smoke", "sweep", "cpu"], default="sweep")
    parser.add_argument("--max-epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50, help="updates per epoch (default 50)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nmt-cluster-costs-"))
    shared = Path(tempfile.mkdtemp(prefix="nmt-cluster-costs-shared-"))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("PYTHONPATH", None)
    cluster = HiddenNodeCluster([ROOT, work], env)
    server_log = work / "mlflow-server.log"
    server = None
    try:
        cluster.start()
        port = _free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
             "--backend-store-uri", f"sqlite:///{work}/mlflow.db", "--artifacts-destination", str(work / "artifacts"),
             "--workers", "1"], stdout=open(server_log, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **SERVER_ENV})
        _wait_health(f"http://127.0.0.1:{port}")
        size_flags = ["--smoke"] if args.size == "smoke" else ["--size", "cpu"]
        if args.size == "sweep":  # the Quickstart sweep's trial model (its preset, applied as train would)
            size_flags = ["--size", "cpu", "--config", str(_sweep_config(work))]
        began = time.time()
        result = subprocess.run(
            [sys.executable, "-m", "platform.train", "--model", "dbsa", *size_flags, "--workers", "2",
             "--cpus-per-worker", "1", "--max-epochs", str(args.max_epochs),
             "--set", f"max_steps_per_epoch={args.steps}", "--address", cluster.address,
             "--storage-path", str(shared / "runs"), "--tracking-uri", f"http://127.0.0.1:{port}",
             "--name", "costs", "--experiment", "costs"],
            cwd=work, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=1800)
        wall = time.time() - began
        if result.returncode != 0:
            print(result.stderr[-3000:], file=sys.stderr)
            return 1
        copies = list((shared / "runs" / "datasets").iterdir())
        dataset_bytes = sum(p.stat().st_size for p in copies[0].rglob("*") if p.is_file())
        checkpoints = [d for d in (shared / "runs" / "costs").iterdir() if d.name.startswith("checkpoint_")]
        checkpoint_bytes = [sum(p.stat().st_size for p in d.rglob("*") if p.is_file()) for d in checkpoints]
        paths = re.findall(r'"(?:GET|POST|PUT|PATCH|DELETE) (/[^ ?"]+)', server_log.read_text(errors="replace"))
        calls = collections.Counter(re.sub(r"^/api/2.0/mlflow-artifacts/artifacts/.*?/artifacts/([^/]+)(/.*)?$",
                                           r"artifact upload: \1/", path) for path in paths)
        read_per_worker = sum((copies[0] / name).stat().st_size for name in ("train.parquet", "src.model", "tgt.model"))
        stored = sum(p.stat().st_size for p in (work / "artifacts").rglob("*") if p.is_file())
        print(f"| piece | measured ({args.size} size, 2 workers, {args.max_epochs} epochs of {args.steps} updates, "
              f"{wall:.0f} s) |")
        print("|---|---|")
        print(f"| dataset copied once to the storage | {dataset_bytes / 1e6:.2f} MB "
              f"({len(list(copies[0].rglob('*')))} files) |")
        print(f"| read by each Train worker at its start | {read_per_worker / 1e6:.2f} MB (train split and subword "
              f"models; rank 0 also the dev split) |")
        print(f"| MLflow artifacts stored for the run | {stored / 1e6:.2f} MB |")
        print(f"| checkpoint written per epoch | {max(checkpoint_bytes) / 1e6:.2f} MB (Ray keeps {len(checkpoints)}) |")
        total = sum(calls.values())
        print(f"| MLflow HTTP requests | {total} in all, {total / args.max_epochs:.1f} per epoch |")
        for path, count in calls.most_common():
            print(f"| &nbsp;&nbsp;{path} | {count} |")
        return 0
    finally:
        if server is not None:
            server.kill()
        cluster.stop()


def _sweep_config(work: Path) -> Path:
    """The sweep preset's model and batching, as a config file for platform.train."""
    from platform import config_io
    from platform.training.config import resolve_config

    config = resolve_config("dbsa", "sweep")
    path = work / "sweep.yaml"
    path.write_text(config_io.dump_yaml(config))
    return path


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_health(uri: str) -> None:
    import urllib.request

    for _ in range(300):
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=2)  # noqa: S310 - always the local http:// server
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("mlflow server did not start")


if __name__ == "__main__":
    sys.exit(main())
