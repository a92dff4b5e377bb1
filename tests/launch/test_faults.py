"""Faults done for real to the session's local Ray cluster: a Train worker SIGKILLed mid-epoch
while the MLflow server is down; a trial Tune stops at a report while its store is busy; and
what a killed sweep driver's resume restores, for every searcher and scheduler, without a
cluster (the kill itself, on Ray: tests/launch/test_autoscaling.py; a sweep through an outage
and diverging trials: tests/test_tune.py).  MLflow (sqlite) and Optuna are real; nothing is mocked."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
import torch
from helpers import rungs, runs_of, tiny_config, validated_epochs, wait_for
from ray_private import train_worker_pids
from servers import MlflowServer

from platform import train


def alive_train_workers() -> list[int]:
    import ray
    from ray.util.state import list_actors

    # this cluster's address: "auto" fails when another Ray instance runs on the machine
    address = ray.get_runtime_context().gcs_address
    actors = list_actors(address=address, filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")],
                         raise_on_missing_output=False)
    return sorted(actor.pid for actor in actors)


def latest_checkpoint(snapshot: Path) -> dict:
    """The metrics of the latest checkpoint Ray Train has registered (empty: none yet)."""
    import json

    try:
        latest = json.loads(snapshot.read_text()).get("latest_checkpoint_result") or {}
    except (OSError, ValueError):  # not written yet, or being replaced
        return {}
    return latest.get("metrics", {})


def latest_checkpoint_epoch(snapshot: Path) -> int:
    """The epoch of the latest checkpoint Ray Train has registered (0: none yet)."""
    return int(latest_checkpoint(snapshot).get("epoch", 0))


def test_a_killed_worker_resumes_mid_epoch_in_the_same_run_and_logs_what_an_outage_kept_from_mlflow_once(
        ray_cluster, demo_dataset, tmp_path, monkeypatch):
    """The production resume path: the MLflow server goes down after epoch 1 arrives; epoch 2 and
    a mid-epoch checkpoint of epoch 3 (``save_every`` 5) are made while it is down (their metrics
    queued in rank 0 only); rank 0 is SIGKILLed (its queue lost; Ray Train restarts the whole
    group whichever rank dies); the new worker group reopens the same run, resumes at that
    update, and the server comes back: the run has every epoch exactly once (2 from the
    checkpoint's history, not a second 1) and exactly the updates of 3 epochs, none lost or
    repeated (which batches: ``tests/training/test_loop.py``, by their examples)."""
    monkeypatch.setenv("RAY_TRAIN_ENABLE_STATE_TRACKING", "1")  # to tell the ranks' pids apart
    server = MlflowServer(tmp_path)
    server.start()
    storage = tmp_path / "runs"
    snapshot = storage / "victim" / "checkpoint_manager_snapshot.json"
    save_every = 5
    failures: list[BaseException] = []
    killed: list[dict[int, int]] = []
    live: list[list[int]] = []

    def epoch_1_logged() -> bool:
        _, found = runs_of(server.uri, "relog")
        return bool(found) and "dev_bleu" in found[0].data.metrics

    def in_epoch_3(metrics: dict) -> bool:  # registered by Ray (in its snapshot), not merely being copied
        return metrics.get("epoch") == 3 and "dev_bleu" not in metrics  # a mid-epoch checkpoint, not the end

    def outage_then_kill():
        try:
            wait_for(epoch_1_logged, 300, "epoch 1 in MLflow", poll=0.2)
            server.stop()
            wait_for(lambda: in_epoch_3(latest_checkpoint(snapshot)), 300, "a mid-epoch checkpoint of epoch 3",
                     poll=0.02)
            pids = wait_for(lambda: (p := train_worker_pids()) and len(p) == 2 and p, 60, "two live workers", poll=0.1)
            live.append(alive_train_workers())  # the ranks' pids are the cluster's live Train workers
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids)
            wait_for(lambda: (p := train_worker_pids()) and len(p) == 2 and not set(p.values()) & set(pids.values()),
                     120, "the new worker group")
            server.start()
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            failures.append(error)

    thread = threading.Thread(target=outage_then_kill, daemon=True)
    thread.start()
    try:
        assert train.main(["--model", "transformer", "--smoke", "--data", str(demo_dataset), "--workers", "2",
                           "--max-epochs", "3", "--set", "max_steps_per_epoch=30", "--save-every", str(save_every),
                           "--experiment", "relog", "--tracking-uri", server.uri, "--storage-path", str(storage),
                           "--max-failures", "1", "--name", "victim", "--average-last", "8",
                           "--set", "optim.lr=1e-9"]) == 0  # weights that stay put: epoch 1 stays the best
        thread.join(timeout=400)
        assert not failures, failures
        assert len(killed) == 1 and live == [sorted(killed[0].values())]
        # the killed rank's scratch (its best checkpoint) went when the new group made its own
        import tempfile

        left = list(Path(tempfile.gettempdir()).glob(f"nmt-*-{killed[0][0]}-*"))
        assert not left, left
        client, (run,) = runs_of(server.uri, "relog")  # the restarted worker group reopened the same run
        assert run.info.status == "FINISHED" and run.data.tags["resumed_from_epoch"] == "2"
        assert run.data.tags["restarts"] == "1"
        assert validated_epochs(client, run.info.run_id) == [1, 2, 3]  # each epoch once: no gap, none twice
        steps = sorted(int(m.step) for m in client.get_metric_history(run.info.run_id, "dev_bleu"))
        per_epoch = steps[-1] - steps[-2]
        resumed_at = int(run.data.tags["resumed_from_update"])
        assert 2 * per_epoch < resumed_at < 3 * per_epoch and resumed_at % save_every == 0, (resumed_at, per_epoch)
        assert run.data.metrics["step"] == 3 * per_epoch  # the updates of 3 epochs, counted across the kill
        # the last 8 checkpoints' weights (every 5 updates and each epoch's end), by update: those
        # kept before the kill (epoch 2's end and earlier) outlived the worker in the run's storage
        checkpoints = sorted({*range(save_every, 3 * per_epoch + 1, save_every), per_epoch, 2 * per_epoch,
                              3 * per_epoch})[-8:]
        assert checkpoints[0] <= 2 * per_epoch < resumed_at
        assert sorted(a.path for a in client.list_artifacts(run.info.run_id, "last_checkpoints")) == [
            f"last_checkpoints/update_{step:08d}.pt" for step in checkpoints]
        assert sorted(path.name for path in (storage / "victim" / "kept" / "last_checkpoints").iterdir()) == [
            f"update_{step:08d}.pt" for step in checkpoints]
        # the best (epoch 1's, before the kill) came back from the run's storage: the restarted
        # worker group logged it, its MLflow model and the tags of that update
        assert run.data.tags["best_step"] == str(per_epoch) and run.data.tags["best_epoch"] == "1"
        best = client.download_artifacts(run.info.run_id, "best/checkpoint.pt", str(tmp_path / "best"))
        assert torch.load(best, weights_only=True)["progress"]["step"] == per_epoch
        outputs = client.get_run(run.info.run_id).outputs.model_outputs
        assert len(outputs) == 1, run.data.tags.get("mlflow_model_error")  # why rank 0 saved no model
        (logged,) = outputs
        assert client.get_logged_model(logged.model_id).params["step"] == str(per_epoch)
    finally:
        if server.process.poll() is None:
            server.stop()


GRID_SPACE = """\
# a 2 x 2 grid of the baseline
model: transformer
params:
  optim.lr: {type: categorical, choices: [1.0e-3, 2.0e-3]}
  dropout: {type: float, low: 0.0, high: 0.3, grid: [0.0, 0.2]}
"""

# what Tune hands the searcher and the scheduler for one trial's epochs, and how it ends
RESUMED_TRIALS = {"t0": [10.0, 12.0, 14.0], "t1": [20.0, 21.0, 22.0], "t2": [5.0, 6.0, 7.0]}


class _Trial:
    """What the schedulers read of a Tune trial; hashable by identity, as Tune's ``Trial`` is."""

    def __init__(self, trial_id: str, config: dict):
        self.trial_id, self.config, self.evaluated_params = trial_id, config, config


def _drive(searcher, scheduler, trial_id: str, epochs: list[float], complete: bool = True) -> dict:
    """Trial ``trial_id`` sampled, its epochs reported (scheduler first, as Tune does) until the
    scheduler stops it or the epochs end, then completed; returns the config it was given."""
    from ray.tune.schedulers import TrialScheduler

    config = searcher.suggest(trial_id)
    trial = _Trial(trial_id, config)
    scheduler.on_trial_add(None, trial)
    result = {}
    for epoch, bleu in enumerate(epochs, 1):
        result = {"training_iteration": epoch, "dev_bleu": bleu}
        decision = scheduler.on_trial_result(None, trial, result)
        if decision == TrialScheduler.STOP:
            break
        searcher.on_trial_result(trial_id, result)
    if complete:
        scheduler.on_trial_complete(None, trial, result)
        searcher.on_trial_complete(trial_id, result)
    return config


@pytest.mark.parametrize("searcher_name,scheduler_name,seeds", [("grid", "hyperband", 1), ("random", "none", 2),
                                                                 ("tpe", "asha", 1), ("cmaes", "none", 1)])
def test_each_searcher_and_scheduler_resumes_where_the_killed_driver_saved_it(tmp_path, searcher_name,
                                                                             scheduler_name, seeds):
    """What ``--resume`` after a killed driver restores, with the real Optuna samplers and Ray
    Tune's schedulers, no cluster (the live study's storage: the test on Ray): a searcher and scheduler
    saved mid-sweep (Tune's ``save_to_dir``, one trial running) are restored into fresh ones,
    which finish the running trial and sample the rest; every trial ends in the study once with
    its final state, a grid gives distinct points, seed repeats keep their groups, and the
    scheduler keeps its rungs (the kill itself, on Ray with the defaults ASHA and TPE:
    tests/launch/test_autoscaling.py)."""
    from helpers import study_of

    from platform.sweeps.searcher import SearchSettings, make_scheduler, make_searcher
    from platform.sweeps.spaces import load_space

    (tmp_path / "grid.yaml").write_text(GRID_SPACE)
    space = load_space(str(tmp_path / "grid.yaml") if searcher_name == "grid" else "dbsa", "smoke")
    settings = SearchSettings(searcher=searcher_name, scheduler=scheduler_name)

    def session():
        scheduler = make_scheduler(settings, 3, metric="dev_bleu", mode="max")
        searcher = make_searcher(space, 0, 3, scheduler=scheduler, settings=settings, seeds_per_config=seeds)
        searcher.set_search_properties("dev_bleu", "max", {})
        return searcher, scheduler

    searcher, scheduler = session()
    configs = {"t0": _drive(searcher, scheduler, "t0", RESUMED_TRIALS["t0"])}
    configs["t1"] = _drive(searcher, scheduler, "t1", RESUMED_TRIALS["t1"][:1], complete=False)  # running: killed
    (tmp_path / "saved").mkdir()
    searcher.save_to_dir(str(tmp_path / "saved"), session_str="s")
    saved_rungs = rungs(scheduler) if scheduler_name in ("asha", "hyperband") else None

    resumed, resumed_scheduler = session()  # the new driver: fresh objects, then what the old one saved
    resumed.restore_from_dir(str(tmp_path / "saved"))
    if saved_rungs is not None:  # ASHA's (HyperBand's first bracket's) rungs, as saved
        assert rungs(resumed_scheduler) == saved_rungs
    if scheduler_name == "asha":  # one bracket: both trials reached its first rung before the kill
        assert saved_rungs[1] >= {"t0", "t1"}
    running = _Trial("t1", configs["t1"])
    for epoch, bleu in enumerate(RESUMED_TRIALS["t1"][1:], 2):  # Tune resumes t1 from its checkpoint
        resumed_scheduler.on_trial_result(None, running, {"training_iteration": epoch, "dev_bleu": bleu})
        resumed.on_trial_result("t1", {"training_iteration": epoch, "dev_bleu": bleu})
    resumed.on_trial_complete("t1", {"training_iteration": 3, "dev_bleu": RESUMED_TRIALS["t1"][-1]})
    configs["t2"] = _drive(resumed, resumed_scheduler, "t2", RESUMED_TRIALS["t2"])

    def knobs(config: dict) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in config.items() if k != "__trial_index__"))

    trials = study_of(resumed).trials
    states = [t.state.name for t in trials]
    if seeds > 1:  # t0, t1: the two seeds of one config, Optuna got their mean once; t2 starts the next
        assert knobs(configs["t0"]) == knobs(configs["t1"]) != knobs(configs["t2"])
        assert states[0] == "COMPLETE" and trials[0].value == pytest.approx((14.0 + 22.0) / 2)
        assert len(trials) == 2
    else:  # every trial once, each with its final state
        assert len(trials) == 3 and set(states) <= {"COMPLETE", "PRUNED"}, states
        assert len({knobs(config) for config in configs.values()}) == 3
    if searcher_name == "grid":  # distinct points of the grid, none repeated across the restore
        points = {knobs(config) for config in configs.values()}
        assert points <= {(("dropout", d), ("optim.lr", lr)) for lr in ("0.001", "0.002") for d in ("0.0", "0.2")}
    if scheduler_name == "asha":  # the weak t2 was compared with the rungs saved before the kill
        assert {"t0", "t1", "t2"} <= rungs(resumed_scheduler)[1]


def test_what_an_epoch_logged_outlives_the_trial_tune_stops_at_its_report_through_a_busy_store_and_an_outage(
        ray_cluster, tmp_path):
    """Tune may end a trial at any report (a scheduler's stop; here the experiment's stop after
    two), and that kills the trial's Train workers at once, their logger's queue with them.  At
    the first report the store is busy (its sqlite file held locked for 4 s, as a busy store holds
    a write): rank 0 waits for MLflow to take what the epoch logged.  At the second the server is
    down: rank 0 keeps what MLflow has not taken in the spool, and Tune stops the trial.  Once the
    server is back, the sweep's closing of the run delivers it: both epochs' metric, the newer
    ``best_step`` and the best checkpoint are in the run, pruned, and nothing is left kept."""
    import ray.tune

    from platform.launch.cluster import DRIVER_CPU
    from platform.sweeps.trial_runs import close_trial_run
    from platform.tracking import runs
    from platform.tracking import spool as records
    from platform.tracking.spool import Spool, spool_root

    server = MlflowServer(tmp_path / "mlflow")
    (tmp_path / "mlflow").mkdir()
    server.start()
    run_id = runs.start_run(server.uri, "stopped", "trial", {}, {}, "")
    root = spool_root(str(tmp_path / "runs"))
    config, uri, server_pid = tiny_config(), server.uri, server.process.pid

    def train(loop: dict) -> None:  # rank 0 of the trial's TorchTrainer, as platform.launch.worker runs it
        import sqlite3
        import threading
        import time

        from platform.launch.worker import RayHooks

        Path(loop["db"]).with_name("worker.pid").write_text(str(os.getpid()))
        hooks = RayHooks(0, loop["uri"], loop["run_id"], loop["config"], dataset_dir="", spool=loop["spool"])
        assert hooks.logger.drain(30)  # the run's opening calls are in
        lock = sqlite3.connect(loop["db"], isolation_level=None, check_same_thread=False)
        lock.execute("BEGIN EXCLUSIVE")  # MLflow's writes wait (sqlite's busy timeout: 5 s)
        threading.Timer(4.0, lock.rollback).start()
        metrics = {"epoch": 1.0, "step": 1.0, "train_loss": 3.0, "dev_bleu": 12.5}
        hooks.report(metrics, {"progress": {"step": 1}}, None, is_best=True)
        os.killpg(loop["server"], signal.SIGKILL)  # the server goes down during the next epoch
        hooks.report({**metrics, "epoch": 2.0, "step": 2.0, "dev_bleu": 13.5}, {"progress": {"step": 2}}, None,
                     is_best=True)
        time.sleep(120)  # the next epoch: Tune stops the trial first
        hooks.report({**metrics, "epoch": 3.0, "step": 3.0}, {"progress": {"step": 3}}, None, is_best=False)

    def trial(_: dict) -> None:  # one Tune trial with its own TorchTrainer (platform.sweeps.sweep.run_trial)
        import ray.train
        from ray.train.torch import TorchTrainer
        from ray.tune.integration.ray_train import TuneReportCallback

        from platform.launch.process_group import NodeBoundTorchConfig

        TorchTrainer(train, train_loop_config={"uri": uri, "run_id": run_id, "config": config,
                                               "db": str(tmp_path / "mlflow" / "mlflow.db"), "spool": root,
                                               "server": server_pid},
                     torch_config=NodeBoundTorchConfig(),  # as run_trial's: nothing listens beyond loopback
                     scaling_config=ray.train.ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
                     run_config=ray.train.RunConfig(name="train", storage_path=str(tmp_path / "runs"),
                                                    callbacks=[TuneReportCallback()])).fit()

    try:
        ray.tune.Tuner(ray.tune.with_resources(trial, {"CPU": DRIVER_CPU}),
                       run_config=ray.tune.RunConfig(name="stop", storage_path=str(tmp_path / "runs"),
                                                     stop={"training_iteration": 2}, verbose=0)).fit()
        import time

        import psutil
        stopped, worker = time.monotonic(), int((tmp_path / "mlflow" / "worker.pid").read_text())
        wait_for(lambda: not psutil.pid_exists(worker), 60, "the stopped trial's Train worker to end")
        print(f"the stopped trial's Train worker ended {time.monotonic() - stopped:.1f} s after the Tuner returned")
        assert server.process.poll() is not None  # the trial took it down
        assert Spool(root).run_ids() == [run_id]  # the second epoch's records, kept by the killed rank 0
        server.start()
        assert close_trial_run(server.uri, "stopped", "", "trial", run_id, records.closing(True, None), root) is None
        from mlflow.tracking import MlflowClient

        client = MlflowClient(server.uri)
        run = client.get_run(run_id)
        # both reports' metric, in; no third one (the trial was stopped at the second)
        assert [(m.step, m.value) for m in client.get_metric_history(run_id, "dev_bleu")] == [(1, 12.5), (2, 13.5)]
        assert run.data.tags["best_step"] == "2" and run.data.tags["pruned"] == "true"
        assert "best" in {a.path for a in client.list_artifacts(run_id)}
        assert Spool(root).run_ids() == []
    finally:
        if server.process.poll() is None:
            server.stop()
