"""Shared fixtures: the real data (``$NMT_TEST_DATA``, by default ../shared/data) and one local
Ray cluster per test session.  Plain helpers shared by the tests are in helpers.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import free_port, validated_epochs

ROOT = Path(__file__).resolve().parents[1]
# the real corpora the tests read in place (README, "Data used by the tests")
TEST_DATA_VARIABLE = "NMT_TEST_DATA"
SHARED_DATA = Path(os.environ.get(TEST_DATA_VARIABLE) or ROOT.parent / "shared" / "data").expanduser().absolute()
TANAKA = SHARED_DATA / "tanaka-enja"
UD_SAMPLES = SHARED_DATA / "ud-samples"

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
SECRET = "nmt-test-secret-7c1f9d"  # a credential as a user's shell would export it: must never be logged
os.environ["AWS_SECRET_ACCESS_KEY_NMT_TEST"] = SECRET


def require_shared_data(path: Path) -> Path:
    """The shared data file, or a failure under CI (CI=true) / a skip on a laptop without it."""
    if path.exists():
        return path
    message = (f"shared data missing: {path} (set {TEST_DATA_VARIABLE} to the test data directory, by default "
               f"../shared/data beside the checkout; see README, 'Data used by the tests')")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def require_module(name: str, why: str):
    """An optional module (an extra), or a failure under CI / a skip on a laptop without it."""
    try:
        return __import__(name)
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{name} is missing: {why}")
        pytest.skip(f"{name} is missing: {why}")


@pytest.fixture(scope="session")
def tanaka() -> Path:
    return require_shared_data(TANAKA)


@pytest.fixture(scope="session")
def ud_samples() -> Path:
    return require_shared_data(UD_SAMPLES)


def run_module(module: str, *args: str, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` from the repository root, as a user would."""
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def wait_for(condition, timeout: float, what: str, poll: float = 0.3):
    """``condition()``'s first true value, polled; an AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(autouse=True)
def _release_relays():
    """The MLflow relays a test's in-process CLI started stop with the test (handles dropped)."""
    yield
    from platform.tracking.store import release_relays

    release_relays()


def pytest_collection_modifyitems(items):
    """Every test that uses the session's Ray cluster is ``slow``: ``pytest -m "not slow"`` is
    the fast subset that starts no Ray (tests that start Ray or train otherwise carry the marker
    themselves)."""
    for item in items:
        if {"ray_cluster", "own_cluster"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def ray_cluster():
    """One real local Ray cluster for the whole test session (4 logical CPUs on 2 cores).

    Workers get the repository through ``runtime_env.working_dir`` (which Ray puts first on
    their PYTHONPATH), exactly as the Train and Tune drivers do."""
    import ray

    from platform.launch.cluster import start_ray

    start_ray(None, num_cpus=4, log_to_driver=False)  # exactly as the CLIs start a local one
    yield ray
    ray.shutdown()


@pytest.fixture
def own_cluster():
    """For a test that starts a cluster of its own (a CLI run without --address, a multi-node
    cluster): the session's cluster, if this process runs one, is shut down for the test and
    started again after it, so that there are never two Ray clusters on the machine at once."""
    import ray

    from platform.launch.cluster import start_ray

    restart = ray.is_initialized()
    if restart:
        ray.shutdown()
    yield
    if restart:
        start_ray(None, num_cpus=4, log_to_driver=False)  # as ``ray_cluster`` starts it


@pytest.fixture(scope="session")
def demo_dataset(tmp_path_factory) -> Path:
    """A small prepared demo dataset (2000/100/100 pairs), built once per session."""
    from platform.data import demo
    from platform.data.encode import PrepareConfig, prepare_demo
    from platform.data.subwords import SubwordConfig

    out = tmp_path_factory.mktemp("demo") / "dataset"
    config = PrepareConfig(src_lang=demo.SRC_LANG, tgt_lang=demo.TGT_LANG, subwords=SubwordConfig(vocab_size=1000))
    prepare_demo(out, config, demo.DemoConfig(num_train=2000, num_dev=100, num_test=100), progress=False, log=lambda m: None)
    return out


@pytest.fixture(scope="session")
def tanaka_dataset(tanaka, tmp_path_factory) -> Path:
    """The real 50k Tanaka ja-en pairs prepared once per session with the CLI (about 12 s)."""
    out = tmp_path_factory.mktemp("tanaka") / "ja-en"
    result = run_module("platform.prepare", "--train", tanaka / "train", "--dev", tanaka / "dev",
                        "--test", tanaka / "test", "--src", "ja", "--tgt", "en", "--out", out)
    assert result.returncode == 0, result.stderr
    return out


def sacrebleu_scores(script: Path) -> list[float]:
    """Run an ``OUT.sacrebleu.sh`` (with this interpreter's sacrebleu) where it lies; its scores in order."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["sh", script.name], cwd=script.parent, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    decoder, text, scores = json.JSONDecoder(), result.stdout.strip(), []
    while text:
        found, end = decoder.raw_decode(text)
        scores += [entry["score"] for entry in (found if isinstance(found, list) else [found])]
        text = text[end:].strip()
    return scores


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
            stdout=subprocess.DEVNULL, stderr=open(log, "ab"), start_new_session=True, env=self.env)
        import urllib.request

        deadline = time.time() + 180
        while time.time() < deadline and self.process.poll() is None:
            if not self.port:
                found = re.search(r"running on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
                self.port = int(found.group(1)) if found else 0
            try:
                if self.port:
                    urllib.request.urlopen(f"{self.uri}/health", timeout=2)
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
    the outage tests on one machine and across nodes that share no disk."""

    EXPERIMENT = "outage"

    def __init__(self, directory: Path, seconds: float = 20.0, backend: str | None = None):
        self.server, self.seconds = MlflowServer(directory, backend=backend), seconds
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
        return bool(found) and "dev_bleu" in found[0].data.metrics

    def _kill_and_restart(self) -> None:
        try:
            wait_for(self._epoch_1_logged, 300, "epoch 1 in MLflow", poll=0.5)
            self.server.stop()
            self.times.append(time.time())
            time.sleep(self.seconds)
            self.times.append(time.time())
            self.server.start()
        except BaseException as error:  # noqa: BLE001 - reported by checked_run
            self.failures.append(error)

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
        assert run.data.metrics["tracking_wait_s"] < 3.0
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
        result = subprocess.run([*as_postgres, str(self.bin / program), *args], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{program}: {result.stderr.strip()[-2000:]}")

    def start(self) -> None:
        if self.bin is None:
            raise RuntimeError("PostgreSQL is not installed (Debian: apt-get install postgresql)")
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "nmt", "--no-sync")
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.directory / "server.log"), "-w", "-o", options, "start")

    def database(self, name: str) -> str:
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "nmt", name)
        return f"postgresql://nmt@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres():
    """One real PostgreSQL server for the session (a database per test: ``postgres.database(name)``)."""
    require_module("psycopg", "psycopg (the dev extra) is MLflow's PostgreSQL driver")
    server = PostgresServer()
    if server.bin is None:  # as for the shared data: a failure under CI, a skip on a laptop
        (pytest.fail if os.environ.get("CI", "").lower() == "true" else pytest.skip)(
            "needs PostgreSQL's server (Debian: apt-get install postgresql)")
    server.start()
    yield server
    server.stop()


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
                urllib.request.urlopen(self.endpoint, timeout=2)
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
