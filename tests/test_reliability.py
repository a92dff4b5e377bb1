"""Faults done for real, without Ray: processes killed while writing, a full disk, an unwritable
directory, an MLflow server that goes away, incompatible checkpoints and hostile input."""

from __future__ import annotations

import ast
import contextlib
import os
import pickle
import random
import resource
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from helpers import ROOT, free_port, run_in_process, run_module, tiny_config, wait_for
from servers import MlflowServer

from platform import config_io
from platform.data.dataset import PreparedDataset as Dataset
from platform.errors import ConfigError
from platform.training.checkpoint import IncompatibleCheckpoint, load_checkpoint
from platform.training.config import load_train_config
from platform.training.context import Context
from platform.training.hooks import LocalHooks
from platform.training.loop import fit


def tiny(**model):
    """A transformer of the smoke size with 1+1 layers: 1 epoch of 2 updates."""
    return tiny_config("transformer", model={"num_encoder_layers": 1, "num_decoder_layers": 1, **model}, max_epochs=1,
                       max_steps_per_epoch=2, eval={"max_sentences": 4})


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """The CLI failed cleanly: non-zero exit, a single ``error:`` line, no traceback."""
    assert result.returncode != 0, result.stdout[-500:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines and lines[-1].startswith("error: "), result.stderr[-2000:]
    return lines[-1]


# ----------------------------------------------------------------------------- interrupted writes

WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})  # before torch, which imports the standard library's platform
    import torch
    from platform.training.checkpoint import CHECKPOINT_FORMAT, save_checkpoint
    step = 0
    while True:
        step += 1
        state = {{"format_version": CHECKPOINT_FORMAT, "step": step, "weights": torch.full((3_000_000,), float(step))}}
        save_checkpoint(state, {path!r})
""")


def test_a_checkpoint_writer_killed_at_random_moments_never_leaves_a_corrupt_checkpoint(tmp_path):
    path = tmp_path / "last.pt"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(root=str(ROOT), path=str(path)))
    rng = random.Random(0)
    kills = 0
    for _ in range(6):
        writer = subprocess.Popen([sys.executable, str(script)])
        deadline = time.time() + 60
        while not (path.exists() and list(tmp_path.glob(".last.pt.tmp-*"))) and time.time() < deadline:  # a save began
            assert writer.poll() is None, "the writer died on its own"
            time.sleep(0.001)
        time.sleep(rng.uniform(0.0, 0.05))  # somewhere inside torch.save, the fsync or the rename
        assert writer.poll() is None
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
        kills += 1
        state = load_checkpoint(path)  # the "latest" name always points at a whole checkpoint
        assert torch.equal(state["weights"], torch.full((3_000_000,), float(state["step"])))
        # a reader only ever opens the final name; what a kill leaves is a hidden temp file
        assert {p.name for p in tmp_path.iterdir()} - {"last.pt", "writer.py"} <= {
            p.name for p in tmp_path.glob(".last.pt.tmp-*")}
        for leftover in tmp_path.glob(".last.pt.tmp-*"):  # so the next round waits for a save of its own
            leftover.unlink()
    assert kills == 6


def test_prepare_killed_midway_leaves_no_dataset_and_the_next_run_succeeds(tmp_path):
    out = tmp_path / "demo"
    args = [sys.executable, "-m", "platform.prepare", "--data", "demo", "--demo-sizes", "3000,50,50",
            "--vocab-size", "500", "--out", str(out), "--quiet"]
    victim = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while not (tmp_path / ".demo.tmp").exists() and time.time() < deadline:  # working, not finished
        time.sleep(0.05)
    time.sleep(0.2)
    assert victim.poll() is None, "prepare finished before it could be killed"
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=60)
    assert not out.exists()  # nothing a later step could mistake for a dataset
    from platform.data import dataset as ds
    from platform.errors import UserError

    with pytest.raises(UserError):
        ds.read_meta(out)
    again = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (out / "meta.json").exists() and not (tmp_path / ".demo.tmp").exists()


# SIGKILLs itself at the moment --overwrite has moved the old dataset aside (out -> .out.old) and
# is about to rename the new one into place: Python's audit hook fires before os.rename runs
KILL_BETWEEN_THE_RENAMES = """
import os, runpy, signal, sys
def hook(event, args):
    if event == "os.rename" and str(args[0]).endswith("/.dataset.tmp") and str(args[1]).endswith("/dataset"):
        os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(hook)
runpy.run_module("platform.prepare", run_name="__main__", alter_sys=True)
"""


def test_a_replacement_killed_between_its_two_renames_gets_the_old_dataset_back(tmp_path):
    out = tmp_path / "dataset"
    args = ["--data", "demo", "--demo-sizes", "200,20,20", "--vocab-size", "300", "--out", str(out), "--quiet"]
    first = run_module("platform.prepare", *args)
    assert first.returncode == 0, first.stderr[-2000:]
    before = (out / "meta.json").read_text()
    killed = subprocess.run([sys.executable, "-c", KILL_BETWEEN_THE_RENAMES, *args, "--demo-sizes", "300,20,20",
                             "--overwrite"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not out.exists() and (tmp_path / ".dataset.old" / "meta.json").exists()  # the kill landed in between
    again = run_module("platform.prepare", *args)  # any later prepare of that --out puts the old one back first
    assert "restored" in again.stderr and "already exists; pass --overwrite" in again.stderr
    assert (out / "meta.json").read_text() == before and not (tmp_path / ".dataset.old").exists()


# ----------------------------------------------------------------------------- environment errors


def test_an_unwritable_output_directory_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_module("platform.prepare", "--data", "demo", "--demo-sizes", "200,20,20", "--vocab-size", "300",
                        "--out", blocker / "dataset", "--quiet")
    assert one_line_error(result).startswith(f"error: {blocker}")  # names the file in the way


def test_output_into_a_closed_pipe_stops_quietly():
    """``python -m platform.tune --dry-run | head``: the reader leaves; no 'error: Broken pipe'."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first write
    try:
        result = subprocess.run([sys.executable, "-m", "platform.tune", "--space", "dbsa", "--dry-run"], cwd=ROOT,
                                stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, "")


def limit_file_size(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_full_disk_during_prepare_is_a_one_line_error_and_leaves_nothing(tmp_path):
    out = tmp_path / "dataset"
    result = subprocess.run([sys.executable, "-m", "platform.prepare", "--data", "demo", "--demo-sizes", "3000,50,50",
                             "--vocab-size", "500", "--out", str(out), "--quiet"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, preexec_fn=limit_file_size(64 * 1024))
    line = one_line_error(result)
    assert line.startswith(f"error: {tmp_path}/.dataset.") and line.endswith(": File too large")  # names the file
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no dataset, no temp directory


@pytest.mark.parametrize("command", [["platform.train", "--model", "transformer"],
                                     ["platform.tune", "--space", "dbsa"]])
def test_an_unreachable_mlflow_server_at_start_fails_fast_with_one_line(tmp_path, command):
    """With the default ``--data demo`` in a directory that has no demo corpus yet: the error
    comes before any work (preparing the corpus, starting Ray, MLflow's minutes of retries)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # run from an empty directory, as from a fresh clone's sibling
    result = subprocess.run([sys.executable, "-m", *command, "--tracking-uri", f"http://127.0.0.1:{free_port()}"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "cannot reach the MLflow tracking server" in one_line_error(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no data/demo, no runs/, no mlflow.db


@contextlib.contextmanager
def logger_after_a_failed_send(tmp_path, monkeypatch, capsys):
    """A ``RunLogger`` of a run on a real server that then went down: its first send (the metrics
    of step 5) failed at once, so its next regular try is ``RETRY_AFTER_S`` away.  Yields the
    server (stopped), the run id and the logger; the server is stopped at the end."""
    from platform.tracking import runs
    from platform.tracking.logger import RunLogger

    server = MlflowServer(tmp_path)
    server.start()
    try:
        run_id = runs.start_run(server.uri, "outage", "r", {}, {}, "")
        logger = RunLogger(server.uri, run_id)
        assert logger.drain(60)
        server.stop()
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the first failure, at once
        logger.metrics({"dev_bleu": 5.0}, step=5)
        wait_for(lambda: "MLflow unreachable" in capsys.readouterr().err, 60, "the first failed send")
        yield server, run_id, logger
    finally:
        if server.process.poll() is None:
            server.stop()


@pytest.mark.timed
def test_a_logger_ending_in_an_outage_asks_health_not_mlflow_and_names_what_it_could_not_log(tmp_path, monkeypatch,
                                                                                            capsys):
    """After a failed send the logger queues new calls without a try for ``RETRY_AFTER_S``, then
    asks the server's ``/health`` before it sends again, so a server still down at the end costs
    seconds, not MLflow's minutes of retries; ``close`` then names every call it could not log,
    in order, on stderr and in what it returns."""
    from platform.tracking.logger import RunLogger

    with logger_after_a_failed_send(tmp_path, monkeypatch, capsys) as (_, run_id, logger):
        monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES")  # MLflow's own retries again: minutes a call
        logger.tag("best_epoch", "5")
        time.sleep(1)  # within RETRY_AFTER_S of the failure a new call is queued, not sent nor probed
        assert "unreachable" not in capsys.readouterr().err and logger.pending[-1].what == "tag best_epoch"
        monkeypatch.setattr(RunLogger, "CLOSE_WAIT_S", 2.0)
        began = time.monotonic()
        assert logger.close() == ["metrics of step 5", "tag best_epoch"]
        assert time.monotonic() - began < 30  # the health check said down: MLflow was not asked
        err = capsys.readouterr().err
        assert f"MLflow stayed unreachable: not logged to run {run_id}: metrics of step 5, tag best_epoch" in err


@pytest.mark.slow  # an outage of seconds, waited out
@pytest.mark.timed
def test_a_drain_waiting_through_an_outage_sends_within_seconds_of_the_servers_return(tmp_path, monkeypatch,
                                                                                      capsys):
    """A failed send puts the next try a minute away; ``drain`` (a run's last report waits in it)
    asks again every ``DRAIN_RETRY_S`` instead, so the queue reaches a server that came back
    seconds later without waiting out that minute."""
    import threading

    from mlflow.tracking import MlflowClient

    with logger_after_a_failed_send(tmp_path, monkeypatch, capsys) as (server, run_id, logger):
        drained = {}

        def drain():
            drained["sent"], drained["at"] = logger.drain(100), time.monotonic()

        waiting = threading.Thread(target=drain)
        waiting.start()
        time.sleep(1)  # the drain's first try finds the server down: the next regular one is a minute away
        server.start()
        back = time.monotonic()
        waiting.join(timeout=120)
        assert drained["sent"] and drained["at"] - back < 30, drained  # not the minute's retry
        assert [m.value for m in MlflowClient(server.uri).get_metric_history(run_id, "dev_bleu")] == [5.0]
        assert logger.close() == []


@pytest.mark.timed
def test_a_tracking_outage_never_holds_the_caller_and_loses_nothing(tmp_path, monkeypatch):
    """RunLogger straight to a real server, MLflow's own retries left as they are (minutes of
    back-off per call): the calls return at once, and all arrive, in order, once it is back.

    The same outage serves a resumed run that re-logs missed epochs (1-3; the server has epoch 1
    and is down when the call is made): nothing waits, and once it is back only 2 and 3 arrive
    (deciding at the call would re-log 1 too)."""
    from mlflow.tracking import MlflowClient

    from platform.tracking import runs
    from platform.tracking.logger import RunLogger

    server = MlflowServer(tmp_path)
    server.start()
    try:
        run_id = runs.start_run(server.uri, "outage", "r", {"a": "1"}, {}, "a: 1\n")
        resumed_id = runs.start_run(server.uri, "resume", "r", {}, {}, "")
        history = [{"epoch": float(e), "dev_bleu": 10.0 * e} for e in (1, 2, 3)]
        first = RunLogger(server.uri, resumed_id)  # the resumed run's first worker logged epoch 1
        first.metrics(history[0], step=1)
        assert first.close() == []
        logger = RunLogger(server.uri, run_id)
        logger.metrics({"dev_bleu": 1.0}, step=1)
        assert logger.drain(60)
        server.stop()
        began = time.monotonic()
        logger.metrics({"dev_bleu": 2.0}, step=2)  # does not raise, does not wait: training goes on
        logger.tag("best_epoch", "2")
        logger.text("hypotheses of epoch 2\n", "dev_hypotheses/epoch_002.txt")
        logger.metrics({"dev_bleu": 3.0}, step=3)
        logger.tag("best_epoch", "3")  # sent after the "2" above, or the store would end up saying 2
        assert time.monotonic() - began < 5.0  # a call that waited would retry the store for minutes
        resumed = RunLogger(server.uri, resumed_id)  # the restarted worker, while the server is down
        began = time.monotonic()
        resumed.missing_metrics(history, "epoch")
        assert time.monotonic() - began < 5.0
        assert not logger.drain(2) and len(logger.pending) >= 3  # nothing got through
        assert not resumed.drain(1)  # down: queued
        server.start()
        logger.metrics({"dev_bleu": 4.0}, step=4)  # queued behind the others
        assert logger.close() == [] and logger.pending == []  # everything, in order
        assert resumed.close() == []
        client = MlflowClient(server.uri)
        assert [(m.step, m.value) for m in client.get_metric_history(run_id, "dev_bleu")] == [
            (1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]
        assert [a.path for a in client.list_artifacts(run_id, "dev_hypotheses")] == ["dev_hypotheses/epoch_002.txt"]
        assert client.get_run(run_id).data.tags["best_epoch"] == "3"  # in order: metric timestamps cannot show it
        logged = [(m.step, m.value) for m in client.get_metric_history(resumed_id, "dev_bleu")]
        assert sorted(logged) == [(1, 10.0), (2, 20.0), (3, 30.0)]  # epoch 1 once: chosen when sent
        # a CLI's own logger (keep_going=False) fails instead of buffering
        server.stop()
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # fail fast here; MLflow retries by default
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
        from mlflow.exceptions import MlflowException

        # refused on a new connection, or reset on one MLflow's session kept alive to the killed server
        with pytest.raises(MlflowException,
                           match=r"runs/set-tag failed .*(Connection refused|NewConnectionError|Connection reset)"):
            RunLogger(server.uri, run_id, reopen=False).tag("x", "y")
    finally:
        if server.process.poll() is None:
            server.stop()


@pytest.fixture(scope="module")
def trained_directory(demo_dataset, tmp_path_factory):
    directory = tmp_path_factory.mktemp("trained")
    fit(tiny(), Dataset.open(demo_dataset), Context(), LocalHooks(directory, tiny()), log=lambda line: None)
    return directory


def test_a_full_disk_during_evaluate_leaves_no_partial_output(trained_directory, demo_dataset, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = subprocess.run([sys.executable, "-m", "platform.evaluate",
                             "--checkpoint", str(trained_directory / "best.pt"),
                             "--test", str(demo_dataset / "conllu" / "test"), "--src", "sov", "--tgt", "svo",
                             "--beam", "1", "--out", str(out / "test")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            preexec_fn=limit_file_size(8 * 1024))
    line = one_line_error(result)
    assert line.startswith(f"error: {out}/test.") and line.endswith(": File too large")  # names the file
    assert list(out.iterdir()) == []


def test_evaluate_writes_its_output_files_all_or_none(tmp_path):
    from platform.inference import write_outputs

    (tmp_path / ".test.tok.hyp.tmp").mkdir()  # the third of the four files cannot be written
    with pytest.raises(IsADirectoryError):
        write_outputs(tmp_path / "test", ["a b"], ["a b"], "en")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".test.tok.hyp.tmp"]  # no file, no temp file


def test_resuming_on_data_with_other_subword_models_is_refused(trained_directory, tmp_path):
    from platform.data import demo
    from platform.data.builtin import prepare_demo
    from platform.data.encode import PrepareConfig
    from platform.data.subwords import SubwordConfig

    other = tmp_path / "other"
    config = PrepareConfig(src_lang=demo.SRC_LANG, tgt_lang=demo.TGT_LANG, subwords=SubwordConfig(vocab_size=400))
    prepare_demo(other, config, demo.DemoConfig(num_train=300, num_dev=20, num_test=20), progress=False,
                 log=lambda m: None)
    longer = load_train_config({**config_io.to_dict(tiny()), "max_epochs": 2})
    with pytest.raises(IncompatibleCheckpoint, match="other src subword models"):
        fit(longer, Dataset.open(other), Context(), LocalHooks(trained_directory, longer), log=lambda line: None)


def translate_in_process(capsys, monkeypatch, *args) -> subprocess.CompletedProcess:
    """``python -m platform.translate ARGS`` (empty stdin) as its ``__main__`` runs it (``run_cli``:
    exit status, one-line errors), in this process; the CLI as a process of its own refuses the
    malicious checkpoints below and runs in tests/test_inference.py."""
    from platform import translate

    return run_in_process(translate.main, args, capsys, monkeypatch, stdin="")


def test_a_checkpoint_from_another_config_is_refused_with_the_reason(trained_directory, demo_dataset, capsys,
                                                                      monkeypatch):
    wider = load_train_config({**config_io.to_dict(tiny(d_model=64)), "max_epochs": 2})
    with pytest.raises(IncompatibleCheckpoint, match="does not fit this model config .*shape"):
        fit(wider, Dataset.open(demo_dataset), Context(), LocalHooks(trained_directory, wider), log=lambda line: None)
    state = load_checkpoint(trained_directory / "best.pt")
    state["model"].pop(next(iter(state["model"])))
    broken = trained_directory / "broken.pt"
    torch.save(state, broken)
    result = translate_in_process(capsys, monkeypatch, "--checkpoint", broken)
    assert one_line_error(result).startswith(f"error: {broken}: the checkpoint does not fit this model config (missing")
    garbage = trained_directory / "garbage.pt"
    garbage.write_bytes(b"\x00not a checkpoint" * 100)
    assert one_line_error(translate_in_process(capsys, monkeypatch, "--checkpoint", garbage)).startswith(
        f"error: {garbage}: not a checkpoint this code can load")


# ----------------------------------------------------------------------------- security


class Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_pickle_checkpoint_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    with open(evil, "wb") as handle:
        pickle.dump({"model": Payload(str(marker))}, handle)
    torch.save({"model": Payload(str(marker))}, tmp_path / "evil2.pt")
    for path in (evil, tmp_path / "evil2.pt"):
        refused = run_module("platform.evaluate", "--checkpoint", path, "--test", tmp_path / "x",
                             "--src", "a", "--tgt", "b")
        assert one_line_error(refused).startswith(f"error: {path}: not a checkpoint this code can load")
    assert not marker.exists()


def test_yaml_configs_are_loaded_safely(tmp_path):
    marker = tmp_path / "pwned"
    hostile = tmp_path / "hostile.yaml"
    hostile.write_text(f"model: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError):
        config_io.read_yaml_mapping(hostile)
    assert not marker.exists()


SOURCES = [p for d in ("platform", "models", "search_spaces", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))]


def calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = getattr(func.value, "id", "?") if isinstance(func, ast.Attribute) else ""  # "" = a bare name
            yield node, owner, name


def test_no_eval_exec_pickle_or_shell_on_any_input():
    found = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node, owner, name in calls(tree):
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            keywords = {k.arg: k.value for k in node.keywords}
            if name in ("eval", "exec") and owner == "" or (owner, name) == ("os", "system"):
                found.append(f"{where}: {name}")
            if owner in ("pickle", "cloudpickle", "marshal") and name in ("load", "loads"):
                found.append(f"{where}: {owner}.{name}")
            explicit_false = isinstance(keywords.get("shell"), ast.Constant) and keywords["shell"].value is False
            if "shell" in keywords and not explicit_false:
                found.append(f"{where}: shell=")
            if (owner, name) == ("torch", "load"):
                weights_only = keywords.get("weights_only")
                if not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                    found.append(f"{where}: torch.load without weights_only=True")
            if (owner, name) == ("yaml", "load") and getattr(keywords.get("Loader"), "id", "") != "_Loader":
                found.append(f"{where}: yaml.load with an unsafe loader")
            if (owner, name) in (("yaml", "unsafe_load"), ("yaml", "full_load")):
                found.append(f"{where}: yaml.{name}")
    assert found == []
    import yaml

    with pytest.raises(yaml.YAMLError, match="python/object"):  # the config loader builds no objects
        config_io.yaml_load("!!python/object/apply:os.system ['true']")
    assert config_io.yaml_load("lr: 5e-4") == {"lr": 5e-4}


def test_no_source_logs_the_environment_wholesale():
    found = []
    for path in SOURCES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "os.environ" in line and any(f"os.environ{tail}" in line for tail in (")", ".items()", ".copy()", "}")):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


def test_hostile_sentence_ids_and_file_names_write_nothing_outside_the_output(demo_dataset, tmp_path):
    import gzip

    work = tmp_path / "work"
    work.mkdir()
    for split in ("train", "dev"):
        for lang in ("sov", "svo"):
            text = gzip.open(demo_dataset / "conllu" / f"{split}.{lang}.conllu.gz", "rt", encoding="utf-8").read()
            sentences = text.strip().split("\n\n")[:300 if split == "train" else 20]
            hostile = [f"# sent_id = ../../../escaped-{i}\n" + s for i, s in enumerate(sentences)]
            (work / f"..%2f{split}.{lang}.conllu").write_text("\n\n".join(hostile) + "\n\n", encoding="utf-8")
    before = set(tmp_path.rglob("*"))
    result = run_module("platform.prepare", "--train", work / "..%2ftrain", "--dev", work / "..%2fdev", "--src", "sov",
                        "--tgt", "svo", "--vocab-size", "300", "--out", work / "out", "--quiet")
    assert result.returncode == 0, result.stderr[-2000:]
    created = set(tmp_path.rglob("*")) - before
    assert created and all(path.is_relative_to(work / "out") for path in created)
    assert not any("escaped" in path.name for path in tmp_path.parent.rglob("*escaped*"))


def test_local_services_listen_on_127_0_0_1_only():
    from platform.launch.cluster import ray_init_kwargs

    assert ray_init_kwargs(None)["dashboard_host"] == "127.0.0.1"
    assert "dashboard_host" not in ray_init_kwargs("auto")  # joining a cluster: its head decides (ray_cluster.yaml)
    import yaml

    cluster = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    head = " ".join(cluster["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head and "--host 127.0.0.1 --port 5000" in head
    # AWS: the user's security group (tests/test_cluster_file.py: SSH from their CIDR only)
    provider = cluster["provider"]
    assert provider["type"] == "aws" and "security_group" not in provider
    # Ray's token authentication: the platform never turns it off, the cluster file turns it on
    setters = [path for path in (ROOT / "platform").rglob("*.py") if "RAY_AUTH_MODE" in path.read_text()]
    assert not setters and "RAY_AUTH_MODE=disabled" not in (ROOT / "ray_cluster.yaml").read_text()


def test_a_pg_dump_that_hangs_is_a_one_line_error_the_backup_loop_survives(tmp_path):
    """The backup loop catches user errors and tries again later; a hung ``pg_dump`` is one."""
    from platform.errors import UserError
    from platform.tracking.backup import dump

    hung = tmp_path / "pg_dump"
    hung.write_text("#!/bin/sh\nsleep 30\n")
    hung.chmod(0o755)
    with pytest.raises(UserError, match="pg_dump: no dump after 0.5 s"):
        dump("postgresql://nmt@127.0.0.1:5432/mlflow", str(hung), timeout=0.5)


def test_a_killed_processs_scratch_directories_go_with_the_next_ones_and_no_other(tmp_path, monkeypatch):
    """``atomic.owned_scratch``: a directory whose process is gone (SIGKILLed: no ``finally``
    ran) is removed when the next one is made; a live process's, and other names, stay."""
    import tempfile

    from platform.atomic import owned_scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=60)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead_dir = tmp_path / f"nmt-worker-{gone.pid}-abc"
        live_dir = tmp_path / f"nmt-worker-{alive.pid}-def"
        other = tmp_path / f"nmt-ckpt-{gone.pid}-ghi"
        for directory in (dead_dir, live_dir, other):
            (directory / "best").mkdir(parents=True)
        made = owned_scratch("nmt-worker-")
        assert made.name.startswith(f"nmt-worker-{os.getpid()}-") and made.is_dir()
        assert not dead_dir.exists() and live_dir.is_dir() and other.is_dir()
    finally:
        alive.kill()
        alive.wait(timeout=60)


RUN_CLI = """
import sys
from platform.errors import UserError, run_cli

def main(argv):
    kind = sys.argv[1]
    if kind == "user":
        raise UserError("bad flag")
    if kind == "os":
        raise PermissionError(13, "Permission denied", "/out/test.hyp")
    if kind == "interrupt":
        raise KeyboardInterrupt
    return 0

run_cli(main)
"""


@pytest.mark.parametrize("kind,status,line", [("user", 2, "error: bad flag"),
                                              ("os", 1, "error: /out/test.hyp: Permission denied"),
                                              ("interrupt", 130, "interrupted"), ("fine", 0, "")])
def test_every_command_exits_with_the_status_of_what_ended_it(kind, status, line):
    """``run_cli``, through which every command runs: 2 for a user error, 1 for the environment
    (an OSError), 130 for Ctrl-C, each with one line and no traceback; 0 otherwise."""
    result = subprocess.run([sys.executable, "-c", RUN_CLI, kind], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == status and result.stderr.strip() == line, result.stderr
