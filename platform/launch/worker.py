"""The Ray Train worker: ``train_loop_per_worker`` runs ``training.loop.fit`` in every DDP worker
with ``RayHooks`` (DDP wrapping, checkpoints through ``ray.train.report``, resuming from
``ray.train.get_checkpoint()``, and rank 0's MLflow logging)."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platform import atomic, compat
from platform.data.dataset import DatasetRef, PreparedDataset
from platform.data.storage import locate
from platform.tracking.logger import RunLogger
from platform.tracking.system import node_sampler
from platform.training.checkpoint import CHECKPOINT_FILE, load_checkpoint, save_checkpoint
from platform.training.config import TrainConfig
from platform.training.context import Context, chosen_precision
from platform.training.hooks import temp_checkpoint
from platform.training.loop import UPDATE_METRICS, fit
from platform.training.retention import Retention
from platform.training.step import Diverged
from platform.training.stopping import STOPPED_EARLY, early_stopping_reason

# in the report after which training ends: a sweep hands that one to Tune only after the
# trainer's fit has returned (sweeps.callbacks.FinalAfterFit)
LAST_REPORT = "last_report"
# how long rank 0 waits, before a report, for MLflow to take what the epoch logged (while it answers)
REPORT_WAIT_S = 10.0
RUN_ID = "run_id"  # in every report: the MLflow run the sweep closes when Tune ends the trial


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker of a run is given (the one value in Ray Train's ``train_loop_config``):
    typed, validated once by the driver."""

    config: TrainConfig
    dataset: DatasetRef
    tracking_uri: str
    run_id: str
    cpus_per_worker: float
    kept_at: str  # where rank 0 keeps the weights to average and the best N (``training.retention``)
    spool: str  # where MLflow records wait through an outage (``tracking.spool``)
    started_at: float | None = None  # time.time() of the launch: the first report's startup_s
    init: dict[str, Any] | None = None  # --init-from: the weights (``launch.init_from``) to start from


SPEC = "spec"  # the key of the WorkerSpec in ``train_loop_config``


def assigned_device():
    """The device Ray Train assigned this worker; the CPU where it assigned a GPU that torch
    cannot drive (a node that declares GPUs without CUDA, such as a test cluster's logical GPU)."""
    import ray.train.torch
    import torch

    device = ray.train.torch.get_device()
    return torch.device("cpu") if device.type == "cuda" and not torch.cuda.is_available() else device


def train_loop_per_worker(loop: dict[str, WorkerSpec]) -> None:
    """Ray Train entry point on every worker: build the context and hooks, then ``fit``."""
    import ray
    import ray.train
    import ray.train.torch
    import torch

    spec = loop[SPEC]
    config = spec.config
    _quiet_report_dumps()
    threads = max(1, min(int(spec.cpus_per_worker), os.cpu_count() or 1))
    torch.set_num_threads(threads)  # Ray pins 1 thread otherwise
    ctx = Context.from_torch_distributed(assigned_device())
    location = spec.dataset.location
    dataset = PreparedDataset.open(location, with_dev=ctx.rank == 0, log=_write_line)
    example = dataset.dev.texts["src_text"][0] if dataset.dev is not None else "a source sentence"
    hooks = RayHooks(ctx.rank, spec.tracking_uri, spec.run_id, config, location, example, spec.kept_at, spec.spool)
    if hooks.logger is not None:  # what ``precision: auto`` chose on this device, and which GPU Ray gave rank 0
        hooks.logger.tag("precision", chosen_precision(config.precision, ctx.device))
        hooks.logger.tag("device", str(ctx.device))
        hooks.logger.tag("gpu_ids", ",".join(str(i) for i in ray.get_gpu_ids()))
        hooks.logger.tag("cuda_visible_devices", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    system, node_logger = _system_metrics(hooks, spec)
    try:
        fit(config, dataset, ctx, hooks, log=_write_line, started_at=spec.started_at, init=spec.init)
        hooks.finish()  # done already with the last epoch's report, unless no epoch was left to train
    finally:
        if system is not None:
            system.stop()
        if node_logger is not None and node_logger is not hooks.logger:
            node_logger.close()
        if hooks.logger is not None:
            hooks.logger.close()  # a last try at what an outage held back; says what is lost
        shutil.rmtree(hooks.workdir, ignore_errors=True)  # what it held is in MLflow (or named lost by close)


def _system_metrics(hooks: RayHooks, spec: WorkerSpec):
    """The node's first worker samples the node's CPU, memory, disk, network and GPU into the
    run (``tracking.system``), through rank 0's logger on rank 0's node, its own elsewhere;
    returns the sampler and the logger it uses (None, None on the node's other workers).  The
    sampler calls from its own thread, so its calls do not count in rank 0's ``held_s``."""
    import ray.train

    import platform as _platform

    if ray.train.get_context().get_local_rank() != 0:
        return None, None
    logger = hooks.logger if hooks.logger is not None else RunLogger(
        spec.tracking_uri, spec.run_id, reopen=False, keep_going=True, spool=spec.spool)
    return node_sampler(logger, _platform.node()), logger


def _quiet_report_dumps() -> None:
    """Ray Train V2 logs every ``ray.train.report`` as ``Reporting training result N:
    TrainingReport(...)`` at INFO, through a logger named by its *file path*, so
    ``LoggingConfig(log_level="ERROR")`` (which filters ``ray.train.*``) lets it through to the
    console.  The metrics are in MLflow and in our own progress line; drop the dump."""
    import logging

    name = compat.train_report_logger()
    if name is not None:  # else another Ray Train: nothing to quiet
        logging.getLogger(name).setLevel(logging.WARNING)


def _write_line(line: str) -> None:
    """Progress lines from rank 0 (not ``print``: Ray Train patches it and would log them twice)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class RayHooks:
    """Ray Train around ``fit``: DDP wrapping, checkpoints through ``ray.train.report``,
    resuming from ``ray.train.get_checkpoint()``, and rank 0's MLflow logging."""

    def __init__(self, rank: int, tracking_uri: str, run_id: str, config: TrainConfig, dataset_dir: str,
                 example_source: str = "a source sentence", kept_at: str = "", spool: str | None = None):
        self.rank, self.config, self.dataset_dir, self.run_id = rank, config, dataset_dir, run_id
        # what the run keeps besides Ray's resume checkpoints (the best one, the last N and best N
        # weights), in the run's storage: it outlives a worker
        self.retention = Retention(locate(kept_at), config) if rank == 0 and kept_at else None
        self.example_source = example_source  # the MLflow model's input example: a dev sentence on rank 0
        if rank == 0:  # MLflow whole before the logger's threads may import it (model.import_mlflow)
            from platform.tracking import model

            model.import_mlflow()
        # what MLflow cannot take when the worker ends is kept in the run's storage (tracking.spool)
        self.logger = RunLogger(tracking_uri, run_id, spool=spool) if rank == 0 else None
        self.num_parameters = 0.0  # set by wrap
        if self.logger is not None:  # where rank 0 ran (a sweep spreads trials over the cluster's nodes)
            import ray

            import platform as _platform

            self.logger.tag("node_id", ray.get_runtime_context().get_node_id())
            self.logger.tag("hostname", _platform.node())
            reason = self.logger.get_tag("diverged")
            if reason:  # Ray restarted a worker group that diverged: it would diverge again
                self.logger.tag("retry_refused", "the run diverged; a restart would diverge again")
                self.logger.close()  # sent before the worker ends (train_loop's finally never saw hooks)
                raise Diverged(reason)
        self.workdir = atomic.owned_scratch("nmt-worker-")  # a killed worker's is removed by the next one
        self.history: list[dict[str, float]] = []
        self.finished = False

    def resume(self) -> dict | None:
        import ray.train

        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            if self.retention is not None:  # what a worker killed before its first checkpoint kept
                self.retention.resumed(0)
            return None
        with checkpoint.as_directory() as directory:
            state = load_checkpoint(Path(directory) / CHECKPOINT_FILE)
        self.history = list(state["progress"]["history"])
        if self.retention is not None:
            self.retention.resumed(state["progress"]["step"])
        if self.logger is not None:  # visible in MLflow: this run survived a failure
            restarts = int(self.logger.get_tag("restarts") or 0) + 1
            self.logger.tag("restarts", str(restarts))
            self.logger.tag("resumed_from_epoch", str(state["progress"]["epoch"]))
            self.logger.tag("resumed_from_update", str(state["progress"]["step"]))  # mid-epoch with save_every
            self.logger.missing_metrics(self.history, "step")  # what an outage kept from MLflow before the failure
        return state

    def diverged(self, reason: str) -> None:
        if self.logger is not None:
            self.logger.tag("diverged", reason)
            self.logger.drain(30)  # in the store before Ray restarts the group, which reads it

    def progress(self, metrics, step) -> None:
        self.logger.metrics(metrics, step=step)

    def wrap(self, model):
        import ray.train.torch

        self.num_parameters = float(sum(p.numel() for p in model.parameters()))  # in every report: an objective
        if self.logger is not None:
            self.logger.metrics({"num_parameters": self.num_parameters}, step=0)

        unused = getattr(model, "may_skip_parameters", False)  # see models.rnn.RecurrentTranslator
        return ray.train.torch.prepare_model(model, move_to_device=False, parallel_strategy="ddp",
                                             parallel_strategy_kwargs={"find_unused_parameters": unused})

    def report(self, metrics, state, evaluation, is_best, final=False) -> None:
        """Rank 0 logs the epoch and reports it to Ray with its checkpoint, once what it logged is
        in MLflow: once Tune sees a report it may end the trial (a scheduler's stop, the last
        report), and that kills the workers at once, their queued records with them (no exit
        handler runs), so an upload still queued (the best checkpoint, the epoch's metrics) would
        be lost.  The wait is bounded (``REPORT_WAIT_S``, none while the server's health check
        says down): what MLflow has not taken by then is kept in the spool, which the sender
        delivers before anything later once the store answers, and which the run's closing
        delivers if the worker is killed first.  The report after which
        training ends carries ``LAST_REPORT``, and the end-of-run logging (``finish``) comes
        before it, delivered or kept in the spool."""
        import ray.train

        reported = {**metrics, "num_parameters": self.num_parameters, RUN_ID: self.run_id,
                    **({LAST_REPORT: 1.0} if final else {})}
        if self.rank != 0:
            ray.train.report(reported)
            return
        self.history.append(metrics)
        if is_best:
            save_checkpoint(state, self.workdir / "best" / CHECKPOINT_FILE)
        if self.retention is not None:  # logged to MLflow by finish()
            self.retention.checkpoint(state, metrics, evaluation is not None,
                                      self.workdir / "best" / CHECKPOINT_FILE if is_best else None)
        self._log(metrics, evaluation, is_best)
        if metrics.get(STOPPED_EARLY):  # the reason in the run (a sweep's summary says COMPLETE)
            self.logger.tag("stopped", early_stopping_reason(self.config))
        if final:
            self.finish()
            self.logger.settle()  # delivered, or kept in the spool: nothing left in this process
        elif not self.logger.drain(REPORT_WAIT_S, while_up=True):
            self.logger.keep()  # what MLflow has not taken outlives this process, in the spool
        with temp_checkpoint(state) as directory:
            ray.train.report(reported, checkpoint=ray.train.Checkpoint.from_directory(str(directory)))
        if self.retention is not None:
            self.retention.registered(state)

    def _log(self, metrics, evaluation, is_best) -> None:
        """A report in MLflow at its update (``step``); the train metrics that a progress entry
        logged at that update already are not logged twice."""
        from platform.tracking import plots  # matplotlib: only rank 0 needs it

        step, epoch = int(metrics["step"]), int(metrics["epoch"])
        every = self.config.log_every
        logged = {k: v for k, v in metrics.items() if not (every and step % every == 0 and k in UPDATE_METRICS)}
        self.logger.metrics(logged, step=step)
        plots.learning_curves(self.history, self.workdir / "learning_curves.png")
        self.logger.artifact(self.workdir / "learning_curves.png", "plots")
        name = f"epoch_{epoch:03d}" if self.config.validate_every is None else f"update_{step:07d}"
        if evaluation is not None:
            self.logger.text("\n".join(evaluation.hypotheses) + "\n", f"dev_hypotheses/{name}.txt")
            self.logger.tag("sacrebleu_signature", evaluation.signature)
        if is_best:
            self.logger.artifact(self.workdir / "best" / CHECKPOINT_FILE, "best")
            self.logger.tag("best_epoch", str(epoch))
            self.logger.tag("best_step", str(step))
            if evaluation is not None:
                self.logger.text("\n".join(evaluation.hypotheses) + "\n", "dev_hypotheses/best.txt")

    def finish(self) -> None:
        """The end of the run, once: the parse heat map, the best checkpoint as an MLflow model,
        the last epochs' weights and how long MLflow held training up."""
        if self.finished:
            return
        self.finished = True
        if self.rank == 0 and self.logger is not None:
            from platform.tracking.diagnostics import log_parse_heat_map

            best, restored_at = self.restored_best()
            log_parse_heat_map(self.logger, best, self.dataset_dir, self.workdir)
            # the best checkpoint as an MLflow model (runs table's Models column, registry), once:
            # a best from before a restart (or a --continue) may have its model already
            logged = (self.logger.model_steps() or set()) if restored_at is not None else set()  # a read: only then
            if best.exists() and restored_at not in logged:
                self._log_mlflow_model(best)
            if self.retention is not None:  # for evaluate --average-last, and the best N
                for kind, paths in self.retention.copy_to(self.workdir / "kept").items():
                    for path in paths:
                        self.logger.artifact(path, kind)
            # how long rank 0's calls into MLflow held training up (RunLogger.held_s): ~0 by design
            last = int(self.history[-1]["step"]) if self.history else 0
            self.logger.metrics({"tracking_wait_s": self.logger.held_s}, step=last)

    def restored_best(self) -> tuple[Path, int | None]:
        """The run's best checkpoint in this worker's folder, and its update where it came from
        the run's storage (None where this worker group saved it): a restarted worker group's
        best may predate the restart, and goes to MLflow again (the dead worker's upload may
        have been lost with its queue)."""
        best = self.workdir / "best" / CHECKPOINT_FILE
        stored = self.retention.best_checkpoint() if self.retention is not None and not best.exists() else None
        if stored is None:
            return best, None
        atomic.write_file(best, lambda handle: handle.write(stored.read_bytes()))
        self.logger.artifact(best, "best")
        progress = load_checkpoint(best)["progress"]
        self.logger.tag("best_epoch", str(progress["best_epoch"]))
        self.logger.tag("best_step", str(progress["best_step"]))
        return best, int(progress["best_step"])

    def _log_mlflow_model(self, best: Path) -> None:
        """A training that finished stays finished if MLflow cannot save its model: the
        checkpoint is logged already; the reason goes to a warning and the tag ``mlflow_model_error``."""
        from platform.tracking import model

        try:
            params = model.save(best, self.workdir / "mlflow_model", self.example_source)
        except Exception as error:  # noqa: BLE001 - said below, the run goes on
            reason = " ".join(str(error).split())[:300] or type(error).__name__
            sys.stderr.write(f"warning: the best checkpoint was not saved as an MLflow model: {reason}\n")
            self.logger.tag("mlflow_model_error", reason)
            return
        self.logger.model(self.workdir / "mlflow_model", int(params["step"]), params)
