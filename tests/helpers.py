"""Helpers the tests share, each written once: where the checkout and the shared test data
are, the shared data or an optional module required (a failure under CI, a skip elsewhere), a
CLI run as a user runs it, polling for a condition, tiny configs from the ``smoke`` size, a free
port, an experiment's MLflow runs, a sweep's command line, the full-binary-tree check.

Imported as ``from helpers import ...`` (pytest puts ``tests/`` on ``sys.path``, as for
``conftest``, ``servers`` and ``model_helpers``; ``tests/ddp_step.py`` runs from ``tests/``).
Only the standard library and pytest are imported here at module level, so ``conftest`` and
``servers`` can use it too.  Fixtures and hooks are in ``conftest``, servers in ``servers``.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the real corpora the tests read in place (README, "Data used by the tests")
TEST_DATA_VARIABLE = "NMT_TEST_DATA"
SHARED_DATA = Path(os.environ.get(TEST_DATA_VARIABLE) or ROOT.parent / "shared" / "data").expanduser().absolute()
TANAKA = SHARED_DATA / "tanaka-enja"
UD_SAMPLES = SHARED_DATA / "ud-samples"
# a credential as a user's shell would export it (conftest exports it for the session): must never be logged
SECRET = "nmt-test-secret-7c1f9d"
SECRET_VARIABLE = "AWS_SECRET_ACCESS_KEY_NMT_TEST"


def under_ci() -> bool:
    """Whether this is CI (``CI=true``): what a laptop may skip, CI must have."""
    return os.environ.get("CI", "").lower() == "true"


def fail_or_skip(message: str) -> None:
    """A failure under CI, a skip on a laptop (missing data, an extra, a system package)."""
    (pytest.fail if under_ci() else pytest.skip)(message)


def require_shared_data(path: Path) -> Path:
    """The shared data file, or a failure under CI (CI=true) / a skip on a laptop without it."""
    if not path.exists():
        fail_or_skip(f"shared data missing: {path} (set {TEST_DATA_VARIABLE} to the test data directory, by "
                     f"default ../shared/data beside the checkout; see README, 'Data used by the tests')")
    return path


def require_module(name: str, why: str):
    """An optional module (an extra), or a failure under CI / a skip on a laptop without it."""
    try:
        return __import__(name)
    except ImportError:
        fail_or_skip(f"{name} is missing: {why}")


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


def sacrebleu_scores(script: Path) -> list[float]:
    """Run an ``OUT.sacrebleu.sh`` (with this interpreter's sacrebleu) where it lies; its scores in order."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["sh", script.name], cwd=script.parent, capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    decoder, text, scores = json.JSONDecoder(), result.stdout.strip(), []
    while text:
        found, end = decoder.raw_decode(text)
        scores += [entry["score"] for entry in (found if isinstance(found, list) else [found])]
        text = text[end:].strip()
    return scores

# What a tiny run changes in the smoke size (``--smoke``): dbsa parses on decoder layer 2, not
# on layer 1 as its recipe's 4/6 gives at 2 layers, and batches are of at most 600 tokens with
# a 5-update warm-up, so that a few updates see several batches.
TINY_MODEL = {"dbsa": {"p_enc": 1, "p_dec": 2}}
TINY_RUN = {"batching": {"max_tokens": 600}, "optim": {"warmup_steps": 5}}


def smoke_dims(model: str, **overrides: Any) -> dict[str, Any]:
    """The ``smoke`` size's model dimensions for ``model``'s config class (``SIZES`` in
    platform/training/config.py), with ``overrides`` (e.g. ``dropout=0.0``)."""
    from models import MODELS
    from platform.training.config import SIZES

    return {**SIZES["smoke"][MODELS[model].config_class], **overrides}


def tiny_config(name: str = "dbsa", **extra: Any):
    """The TrainConfig of a tiny run: what ``platform.train --model NAME --smoke`` resolves,
    with ``TINY_MODEL`` and ``TINY_RUN``, then ``extra`` merged section by section
    (``optim={"lr": 1e-9}`` keeps the other optim settings; ``model={"d_model": 64}`` too)."""
    from platform import config_io
    from platform.training.config import load_train_config, resolve

    data = resolve(name, "smoke")
    for changes in ({"model": TINY_MODEL.get(name, {})}, TINY_RUN, extra):
        config_io.merge(data, copy.deepcopy(changes))
    return load_train_config(data)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the OS just handed out (free, unless someone takes it first)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def validated_epochs(client, run_id: str) -> list[int]:
    """The epoch of each ``dev_bleu`` point of a run, in update order, every point counted (a
    duplicate shows): metrics are logged at their update, and ``epoch`` is logged with each."""
    epochs = {int(m.step): int(m.value) for m in client.get_metric_history(run_id, "epoch")}
    return [epochs[int(m.step)] for m in sorted(client.get_metric_history(run_id, "dev_bleu"), key=lambda m: m.step)]


def runs_of(uri: str, experiment: str):
    """``(client, runs)``: an MlflowClient of ``uri`` and every run of ``experiment``, newest
    first, every page of the search (no cap); no runs when the experiment does not exist."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    runs, token = [], None
    while found is not None:
        page = client.search_runs([found.experiment_id], page_token=token)
        runs += page
        token = page.token
        if not token:
            break
    return client, runs


def sweep_args(dataset: Path, tmp_path: Path, *extra: str, experiment: str = "sweep", space: str = "dbsa") -> list[str]:
    """``platform.tune``'s arguments for a smoke sweep of ``space`` over ``dataset``, logged to
    ``tmp_path/mlflow.db`` under ``experiment``, its results under ``tmp_path/runs``."""
    return ["--space", space, "--smoke", "--data", str(dataset), "--experiment", experiment,
            "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--storage-path", str(tmp_path / "runs"), *extra]


def assert_full_binary_tree(parent, n: int, width: int | None = None) -> None:
    """``parent`` is a full binary tree over ``n`` leaves: leaves 0..n-1, phrase nodes
    width..width+n-2, every phrase node with exactly two children, every other node's parent a
    phrase node numbered after it, and one root: the last phrase node (the leaf when n == 1).

    ``width`` None: the compact layout of ``platform.data.trees.binary_tree`` (width n, exactly
    2n-1 nodes).  A width: the padded batch layout of ``Source.tree_parent`` (the padding is
    the caller's to check)."""
    parent = [int(p) for p in parent]
    if width is None:
        width = n
        assert len(parent) == 2 * n - 1, f"{len(parent)} nodes for {n} leaves"
    nodes = list(range(n)) + list(range(width, width + n - 1))
    root = width + n - 2 if n > 1 else 0
    assert [node for node in nodes if parent[node] == -1] == [root], parent
    children = dict.fromkeys(nodes, 0)
    for node in nodes:
        if node != root:
            assert parent[node] in children and parent[node] >= width and parent[node] > node, (node, parent)
            children[parent[node]] += 1
    assert all(children[node] == (2 if node >= width else 0) for node in nodes), parent


def end_ray_processes_under(temp_dir: str | Path, timeout: float = 3.0) -> int:
    """End the Ray processes of the cluster started with ``--temp-dir temp_dir`` (every node of
    it on this machine: their raylets, GCS, dashboard and monitors name the directory on their
    command lines) and all their children; no other process.  SIGTERM, then SIGKILL for what is
    left after ``timeout`` seconds (the GCS and the autoscaler's monitor never end on SIGTERM,
    the raylet takes 12 s: a cluster a test throws away has nothing to save in that time).
    Returns how many processes there were."""
    import psutil

    marker = str(temp_dir)
    own = []
    for process in psutil.process_iter(["cmdline"]):
        if any(marker in argument for argument in process.info["cmdline"] or []):
            own.append(process)
    family = {p.pid: p for p in own}
    for process in own:
        try:
            family.update({child.pid: child for child in process.children(recursive=True)})
        except psutil.NoSuchProcess:
            pass
    me = psutil.Process()  # never this process or its parents (a command line that names the directory too)
    for spared in [me, *me.parents()]:
        family.pop(spared.pid, None)
    for process in family.values():
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(list(family.values()), timeout=timeout)  # then SIGKILL
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    return len(family)


def benchmark_module(name: str):
    """``benchmarks/<name>.py``, imported (a benchmark's imports run only where a test needs it)."""
    import importlib

    return importlib.import_module(f"benchmarks.{name}")


def optuna_search(searcher):
    """The OptunaSearch inside a sweep's ``searcher`` (itself, or the one a Repeater wraps)."""
    return getattr(searcher, "searcher", searcher)


def study_of(searcher):
    """The Optuna study a live searcher samples from."""
    from platform import compat

    return compat.optuna_study(optuna_search(searcher))


def saved_state(sweep_path: str):
    """What Ray saved with the experiment in the sweep's local directory: the searcher's Optuna
    study and the scheduler with its state (None where the searcher carried none); (None, None)
    for URI storage or where nothing was saved."""
    if "://" in sweep_path or not Path(sweep_path).is_dir():
        return None, None
    from ray.tune.search.optuna import OptunaSearch

    from platform import compat
    from platform.sweeps.optuna_search import restore_scheduler
    from platform.sweeps.searcher import SearchSettings, make_scheduler

    saved = OptunaSearch()
    try:
        saved.restore_from_dir(sweep_path)
    except RuntimeError:  # none saved there
        return None, None
    scheduler = None
    if getattr(saved, "scheduler_state", None) is not None:
        scheduler = make_scheduler(SearchSettings(), 1)  # its settings come back with its state
        restore_scheduler(scheduler, saved.scheduler_state)
    return compat.optuna_study(saved), scheduler


def rungs(scheduler) -> dict[int, set[str]]:
    """ASHA's first bracket: {milestone epoch: the trial ids recorded there}."""
    from ray_private import asha_rungs

    return {int(milestone): set(recorded) for milestone, recorded in asha_rungs(scheduler)}


def run_in_process(main, args, capsys, monkeypatch=None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` as its ``__main__`` runs ``main`` (``run_cli``: exit status,
    one-line errors), in this process (no interpreter start), as a CompletedProcess; ``stdin``
    (with ``monkeypatch``) is what it reads."""
    import io

    from platform.errors import run_cli

    argv = [str(arg) for arg in args]
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        run_cli(main, argv)
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(argv, exited.value.code or 0, captured.out, captured.err)


LOOPBACK = ("127.0.0.1:", "[::1]:", "[::ffff:127.0.0.1]:")  # how ``ss`` shows a loopback address


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


def processes_naming(marker: str) -> set[int]:
    """Every process whose command line names ``marker`` (a cluster's ``--temp-dir``: every Ray
    process of its nodes on this machine does), and all their children."""
    import psutil

    found = set()
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in argument for argument in process.info["cmdline"] or []):
                found.add(process.pid)
                found.update(child.pid for child in process.children(recursive=True))
        except psutil.NoSuchProcess:
            continue
    return found


class ListenerWatch:
    """Samples, every ``every`` seconds until ``stop``, the listening TCP sockets of this process's
    descendants and of every process that names one of ``markers`` (a cluster's temporary
    directory); ``exposed()`` lists those seen on an address other than loopback."""

    def __init__(self, *markers: str, every: float = 1.0):
        self.markers, self.every = markers, every
        self.seen: set[tuple[str, str]] = set()
        self.samples, self.errors = 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> ListenerWatch:
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                pids = descendants(os.getpid())
                for marker in self.markers:
                    pids |= processes_naming(marker)
                self.seen.update(listening(pids))
                self.samples += 1
            except Exception as error:  # noqa: BLE001 - said by exposed(): a watch that stopped looking proves nothing
                self.errors.append(repr(error))
            self._stop.wait(self.every)

    def stop(self) -> ListenerWatch:
        self._stop.set()
        self._thread.join(timeout=60)
        return self

    def exposed(self) -> list[tuple[str, str]]:
        """Every listener seen beyond loopback; the sampling itself must have worked throughout."""
        assert self.samples > 0 and len(self.errors) <= max(1, self.samples // 20), self.errors[-5:]
        return sorted((address, owner) for address, owner in self.seen if not address.startswith(LOOPBACK))


def worker_may_write(key: str) -> bool:
    """Whether ``cluster/worker-role-policy.json`` lets a worker node write ``key`` of the
    bucket (IAM's rule: an explicit Deny wins; ``*`` matches any characters, ``/`` included)."""
    import fnmatch

    policy = json.loads((ROOT / "cluster" / "worker-role-policy.json").read_text())
    arn = f"arn:aws:s3:::CHANGE-ME-bucket/{key}"

    def matches(statement) -> bool:
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        return "s3:PutObject" in statement["Action"] and any(fnmatch.fnmatchcase(arn, r) for r in resources)

    effects = {statement["Effect"] for statement in policy["Statement"] if matches(statement)}
    return effects == {"Allow"}


def alive_actors() -> list[str]:
    """Each alive actor's class, state, process and required resources (what a leak leaves behind)."""
    from ray.util.state import list_actors

    return [f"{a.class_name} pid={a.pid} resources={a.required_resources} name={a.name!r}"
            for a in list_actors(filters=[("state", "!=", "DEAD")], detail=True)]


def assert_the_cluster_is_free(timeout: float = 180) -> None:
    """Every CPU of the cluster back and no placement group left (a slow teardown on a busy
    machine is not a leak: a leak never ends)."""
    import ray
    from ray.util import placement_group_table

    total = ray.cluster_resources()["CPU"]
    try:
        wait_for(lambda: ray.available_resources().get("CPU", 0) == total, timeout, "every CPU back")
    except AssertionError as error:
        raise AssertionError(f"{error} ({ray.available_resources().get('CPU', 0)} of {total} free); "
                             f"alive: {alive_actors()}; placement groups: {placement_group_table()}") from None
    live = [pg for pg in placement_group_table().values() if pg["state"] != "REMOVED"]
    assert live == []  # no leaked placement groups


def start_session_cluster(ray):
    """Start the session's local Ray cluster (4 logical CPUs on 2 cores, as the CLIs start a
    local one) unless this process runs one; returns ``ray``.  ``ray_cluster`` calls it, and so
    does a module-scoped fixture that needs the cluster (it depends on ``_session_ray``)."""
    from platform.launch.cluster import start_ray

    if not ray.is_initialized():
        start_ray(None, num_cpus=4, log_to_driver=False)
    return ray
