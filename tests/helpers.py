"""Helpers the tests share, each written once: tiny configs from the ``smoke`` size, a free
port, an experiment's MLflow runs, a sweep's command line, the full-binary-tree check.

Imported as ``from helpers import ...`` (pytest puts ``tests/`` on ``sys.path``, as for
``conftest`` and ``model_helpers``; ``tests/ddp_step.py`` runs from ``tests/``).  Only the
standard library is imported here at module level, so ``conftest`` can use it too.
"""

from __future__ import annotations

import copy
import socket
from pathlib import Path
from typing import Any

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
    from platform import config as config_io
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


def end_ray_processes_under(temp_dir: str | Path, timeout: float = 15.0) -> int:
    """End the Ray processes of the cluster started with ``--temp-dir temp_dir`` (every node of
    it on this machine: their raylets, GCS, dashboard and monitors name the directory on their
    command lines) and all their children; no other process.  SIGTERM, then SIGKILL for what is
    left after ``timeout`` seconds.  Returns how many processes there were."""
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
    _, alive = psutil.wait_procs(list(family.values()), timeout=timeout)  # then SIGKILL, as Ray's own stop command does
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    return len(family)


def benchmark_module(name: str):
    """``benchmarks/<name>.py`` imported as a module (``benchmarks/`` is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
