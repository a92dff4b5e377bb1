"""Real servers the tests start on 127.0.0.1 and stop again: an MLflow tracking server (and a
harness that takes it down mid-training), PostgreSQL, and an S3-compatible endpoint (moto)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from helpers import free_port, validated_epochs, wait_for

from platform.tracking.store import SERVER_ENV


class MlflowServer:
    """A real ``mlflow server`` on 127.0.0.1 that can be stopped and started again.

    The first start lets the server choose its port (``--port 0``; no probe-then-bind race) and
    reads it from uvicorn's "running on" line; a restart takes the same port back."""

    def __init__(self, directory: Path, artifact_root: str | None = None, env: dict[str, str] | None = None,
                 backend: str | None = None):
        """``artifact_root``: an object store (``s3://...``) that clients upload to themselves
        (``--default-artifact-root ... --no-serve-artifacts``, as on ``ray_cluster.yaml``'s head);
        default: a directory the server proxies.  ``backend``: the backend store's URL (a
        PostgreSQL database, as on the cluster); default: a sqlite file in ``directory``."""
        self.directory, self.port, self.process = directory, 0, None
        self.artifact_root, self.env = artifact_root, env
        self.backend = backend or f"sqlite:///{directory}/mlflow.db"

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = self.directory / f"server-{time.time_ns()}.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--backend-store-uri", self.backend, "--workers", "1",
             *(["--default-artifact-root", self.artifact_root, "--no-serve-artifacts"] if self.artifact_root else
               ["--artifacts-destination", str(self.directory / "artifacts")])],
            stdout=subprocess.DEVNULL, stderr=open(log, "ab"), start_new_session=True,
            env={**(self.env or os.environ), **SERVER_ENV})
        import urllib.request

        deadline = time.time() + 180
        while time.time() < deadline and self.process.poll() is None:
            if not self.port:
                found = re.search(r"running on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
                self.port = int(found.group(1)) if found else 0
            try:
                if self.port:
                    urllib.request.urlopen(f"{self.uri}/health", timeout=2)  # noqa: S310 - a local http:// server
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError("mlflow server did not start: " + log.read_text(errors="replace")[-2000:])

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)


class MlflowOutage:
    """A real ``mlflow server`` on 127.0.0.1 that a thread SIGKILLs once the first run of the
    experiment ``outage`` has logged epoch 1, and starts again ``seconds`` later: train with
    ``--tracking-uri outage.uri --experiment outage``, then ``checked_run()``.  One harness for
    the outage tests on one machine and across nodes that share no disk.  With ``seconds=None``
    it stays down until the test calls ``restart()`` (an outage across the end of a run)."""

    EXPERIMENT = "outage"

    def __init__(self, directory: Path, seconds: float | None = 20.0, backend: str | None = None, when=None):
        self.server, self.seconds = MlflowServer(directory, backend=backend), seconds
        self.when = when  # the runs (search_runs) -> bool on which it goes down; default: epoch 1 logged
        self.times: list[float] = []  # when it went down, when it came back
        self.failures: list[BaseException] = []
        self.thread = None

    @property
    def uri(self) -> str:
        return self.server.uri

    def __enter__(self) -> MlflowOutage:
        import threading

        self.server.start()
        self.thread = threading.Thread(target=self._kill_and_restart, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *error) -> None:
        self.thread.join(timeout=400)
        if self.server.process.poll() is None:
            self.server.stop()

    def _epoch_1_logged(self) -> bool:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.uri)
        experiment = client.get_experiment_by_name(self.EXPERIMENT)
        found = client.search_runs([experiment.experiment_id]) if experiment else []
        if self.when is not None:
            return self.when(found)
        return any("dev_bleu" in run.data.metrics for run in found)  # one run, or a sweep's first trial

    def _kill_and_restart(self) -> None:
        try:
            wait_for(self._epoch_1_logged, 300, "epoch 1 in MLflow", poll=0.5)
            self.server.stop()
            self.times.append(time.time())
            if self.seconds is not None:
                time.sleep(self.seconds)
                self.restart()
        except BaseException as error:  # noqa: BLE001 - reported by checked_run
            self.failures.append(error)

    def restart(self) -> None:
        self.times.append(time.time())
        self.server.start()

    def checked_run(self, epochs: int = 4):
        """After training: the outage happened; the run FINISHED with every epoch (some measured
        while the server was down), ``tracking_wait_s`` < 3 s (rank 0, so no rank, was never held
        up by MLflow) and its artifacts; returns the run."""
        from mlflow.tracking import MlflowClient

        self.thread.join(timeout=400)
        assert not self.failures and len(self.times) == 2, self.failures
        client = MlflowClient(self.uri)
        (run,) = client.search_runs([client.get_experiment_by_name(self.EXPERIMENT).experiment_id])
        assert run.info.status == "FINISHED"
        history = client.get_metric_history(run.info.run_id, "dev_bleu")
        assert validated_epochs(client, run.info.run_id) == list(range(1, epochs + 1))  # every epoch arrived, once
        assert any(self.times[0] <= m.timestamp / 1000 <= self.times[1] for m in history)  # measured while down
        assert run.data.metrics["tracking_wait_s"] < 3.0, run.data.metrics["tracking_wait_s"]
        assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"best", "plots", "dev_hypotheses"}
        return run


class PostgresServer:
    """A real PostgreSQL server (Debian's package) on 127.0.0.1, in a cluster of its own under a
    temporary directory, run as the ``postgres`` user (the server refuses root); ``database()``
    makes a fresh database and returns its URL."""

    def __init__(self):
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="nmt-postgres-"))
        self.data = self.directory / "data"
        self.bin = self._bin_directory()

    @staticmethod
    def _bin_directory() -> Path | None:
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
        return versions[-1].parent if versions else None

    def _run(self, program: str, *args: str) -> None:
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        result = subprocess.run([*as_postgres, str(self.bin / program), *args], capture_output=True, text=True,
                                timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{program}: {result.stderr.strip()[-2000:]}")

    def start(self) -> None:
        if self.bin is None:
            raise RuntimeError("PostgreSQL is not installed (Debian: apt-get install postgresql)")
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "nmt", "--no-sync")
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.directory / "server.log"), "-w", "-o", options,
                  "start")

    def database(self, name: str) -> str:
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "nmt", name)
        return f"postgresql://nmt@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


class MotoServer:
    """A real S3-compatible endpoint (moto's standalone server) on 127.0.0.1."""

    def __init__(self):
        self.port, self.process = free_port(), None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, env: dict[str, str]) -> None:
        server = Path(sys.executable).parent / "moto_server"
        self.process = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(self.port)], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        import urllib.request

        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.endpoint, timeout=2)  # noqa: S310 - a local http:// server
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("moto_server did not start")

    def env(self) -> dict[str, str]:
        """What a client needs to use it (pyarrow and boto3 read these)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1"}

    def create_bucket(self, name: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                     region_name="us-east-1").create_bucket(Bucket=name)

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


def served_predictions(model: Path | str, scratch: Path, inputs: list[str], params: dict | None = None,
                       tracking_uri: str | None = None) -> list[str]:
    """What ``mlflow models serve -m MODEL`` (a directory, or a ``models:/`` URI of the store at
    ``tracking_uri``) answers over HTTP on 127.0.0.1 for ``inputs``; it runs from a directory
    outside the repository (where ``platform`` is the standard library's until the model loads)
    and is stopped before this returns."""
    outside = scratch / "elsewhere"
    outside.mkdir(exist_ok=True)
    serve = ["mlflow", "models", "serve", "-m", str(model), "--env-manager", "local", "-h", "127.0.0.1", "-p", "0"]
    return ask_model_server(serve, {"inputs": inputs, "params": params or {}}, outside, scratch / "serve.log",
                            tracking_uri or f"sqlite:///{scratch}/unused.db")


def ask_model_server(serve: list[str], payload: dict, cwd: Path, log_path: Path, tracking_uri: str) -> list[str]:
    """Run ``serve`` (an ``mlflow models serve ... -p PORT`` command line, given a free port here)
    from ``cwd`` with this interpreter's MLflow, POST ``payload`` to its ``/invocations`` once it
    answers ``/ping``, stop it; returns its predictions."""
    import json
    import urllib.request

    port = free_port()
    command = [sys.executable, "-m", *serve]
    command[command.index("-p") + 1] = str(port)
    env = {**os.environ, "PYTHONPATH": "", "MLFLOW_TRACKING_URI": tracking_uri,  # its uvicorn: this interpreter's
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
    try:
        def ready():
            assert server.poll() is None, log_path.read_text()[-3000:]
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2).status == 200
            except OSError:
                return False

        wait_for(ready, 180, "the model server")
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", method="POST",
                                         data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"})
        answer = json.loads(urllib.request.urlopen(request, timeout=120).read())  # noqa: S310 - the test's server
    finally:
        with contextlib.suppress(ProcessLookupError):  # a server that died: ready() says why
            os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    assert set(answer) == {"predictions"}, answer
    return answer["predictions"]
