"""One training run on Ray Train V2: open the MLflow run, run a ``TorchTrainer`` of
``--workers`` DDP workers (gloo on CPU, nccl with GPUs), close the run (docs/architecture.md).

``platform.train`` calls ``run`` once; every Tune trial of ``sweeps.sweep`` calls it for its
own trainer.  What crosses to the workers is one typed ``WorkerSpec`` (its ``TrainConfig``
validated once, here), not data to load again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from platform import config_io
from platform.data import dataset as ds
from platform.data.storage import locate
from platform.errors import UserError
from platform.launch.cluster import start_ray
from platform.launch.init_from import InitFrom
from platform.launch.worker import SPEC, WorkerSpec, train_loop_per_worker
from platform.redaction import redact
from platform.tracking import runs
from platform.tracking import spool as outage
from platform.tracking.relay import start_relay
from platform.tracking.spool import Spool, spool_root
from platform.training.config import TrainConfig
from platform.training.retention import resume_kept


@dataclass(frozen=True)
class Job:
    """Everything a training run needs besides the config: where and how it runs."""

    dataset: ds.DatasetRef
    workers: int
    gpus_per_worker: float
    cpus_per_worker: float
    experiment: str
    tracking_uri: str
    run_name: str
    storage_path: str  # a directory, or shared storage such as s3://bucket/prefix
    max_failures: int
    started_at: float | None = None  # time.time() of the launch: the first epoch logs startup_s from it
    git_commit: str = ""  # the launching driver's commit (a trial runs in Ray's copy, without .git)
    init: InitFrom | None = None  # --init-from: the weights the run starts from


def run(config: TrainConfig, job: Job, *, parent_run_id: str | None = None, tags: dict[str, str] | None = None,
        ray_address: str | None = None, callbacks: list | None = None, reuse: dict[str, str] | None = None,
        after_fit: Callable[[Any], None] | None = None) -> str:
    """Open the MLflow run, train with Ray Train, close the run; returns the run id.

    With ``reuse`` (tags that identify one run: a trial's parent run and trial id) the run that
    carries them is reopened instead of creating a duplicate (a retried trial resumes its own run).
    ``after_fit`` gets Ray Train's Result once the run is closed (a sweep's trial reports its
    last result to Tune there).  Raises ``TrainingFailed`` (after marking the run FAILED) if the
    workers failed for good."""
    meta = job.dataset.meta or ds.read_meta(job.dataset.location)  # read once by the command that made the job
    config_yaml = config_io.dump_yaml(config)
    extra = {"model": config.model.name, "workers": job.workers, "gpus_per_worker": job.gpus_per_worker,
             "git_commit": job.git_commit or runs.git_commit(), "dataset_sha256": runs.dataset_sha256(meta),
             "data": job.dataset.name}
    tags = {"model": config.model.name, **(job.init.tags() if job.init else {}), **(tags or {})}
    start_ray(ray_address)
    relay = start_relay(job.tracking_uri)  # None where the store is remote; held until the run is closed
    # (the command's own holds it for the command: platform.train's, the sweep's driver)

    def open_run() -> str:
        run_id = runs.find_run(job.tracking_uri, job.experiment, reuse) if reuse else None
        if run_id is None:
            run_id = runs.start_run(job.tracking_uri, job.experiment, job.run_name, runs.run_params(config, extra),
                                    tags, config_yaml, parent_run_id,
                                    source="platform.tune" if parent_run_id else "platform.train")
            runs.log_dataset_inputs(job.tracking_uri, run_id, job.dataset.name, meta)
            if job.init is not None and job.init.model_id:  # the parent model: the run's input
                runs.log_model_input(job.tracking_uri, run_id, job.init.model_id)
        return run_id

    # a sweep's trial waits through a tracking outage to open its run (platform.train has
    # checked the store before it started: down there is a one-line error)
    run_id = outage.when_up(job.tracking_uri, open_run, f"run {job.run_name}") if parent_run_id else open_run()
    try:
        result = _fit_with_ray(config, job, run_id, callbacks or [])
    except Exception as error:  # the run closed FAILED with the reason (kept through an outage), then the error
        try:
            close_run(job, run_id, error)
        except Exception as closing:  # noqa: BLE001 - the training's own error is the one to raise
            print(f"warning: run {run_id} could not be closed: {closing}", flush=True)
        raise
    except BaseException as error:  # Ctrl-C, a Tune stop: closed if the store answers now, not waited for
        runs.end_run(job.tracking_uri, run_id, error=error, only_if_running=True, spool=spool_root(job.storage_path))
        raise
    close_run(job, run_id)
    del relay  # the run is closed: its relay may stop (a sweep's driver holds its own)
    if after_fit is not None:
        after_fit(result)
    return run_id


def close_run(job: Job, run_id: str, error: BaseException | None = None) -> None:
    """The run closed after what its workers kept in the spool (``tracking.spool``); while the
    store is down its end is kept there too, after them, and nothing waits: the next command
    that opens the store (or the sweep that closes the trial) delivers them in order."""
    root = spool_root(job.storage_path)
    if not outage.close(job.tracking_uri, run_id, outage.end(error), root):
        print(f"MLflow at {redact(job.tracking_uri)} does not answer: the end of run {job.run_name} ({run_id}) is "
              f"kept in {Spool(root)} with its other records; the next command that opens the store delivers "
              f"them (python -m platform.report --replay)", flush=True)


class TrainingFailed(UserError):
    pass


def _fit_with_ray(config: TrainConfig, job: Job, run_id: str, callbacks: list):
    import ray.train
    from ray.train.torch import TorchTrainer

    from platform.launch.process_group import NodeBoundTorchConfig  # Ray Train: heavy, where a run trains

    use_gpu = job.gpus_per_worker > 0
    resources = {"CPU": job.cpus_per_worker, **({"GPU": job.gpus_per_worker} if use_gpu else {})}
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={SPEC: WorkerSpec(
            config=config, dataset=job.dataset, tracking_uri=job.tracking_uri, run_id=run_id,
            cpus_per_worker=job.cpus_per_worker, kept_at=kept_location(job), spool=spool_root(job.storage_path),
            started_at=job.started_at, init=job.init.loop_config() if job.init else None)},
        scaling_config=ray.train.ScalingConfig(num_workers=job.workers, use_gpu=use_gpu,
                                               resources_per_worker=resources),
        torch_config=NodeBoundTorchConfig(),  # the process group listens on the node address only
        run_config=ray.train.RunConfig(
            name=job.run_name, storage_path=str(job.storage_path),
            failure_config=ray.train.FailureConfig(max_failures=job.max_failures),
            # the newest checkpoints, to resume from (the best one goes to MLflow from rank 0)
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=resume_kept(config)),
            logging_config=ray.train.LoggingConfig(log_level="ERROR"),  # our own progress lines only
            callbacks=callbacks),
    )
    try:
        return trainer.fit()
    except ray.train.TrainingFailedError as error:
        raise TrainingFailed(f"training failed: {_root_cause(error)}") from None


def kept_location(job: Job) -> str:
    """Where the run's kept weights live (``training.retention``): beside Ray's checkpoints of
    the run, in its storage path, so a restarted worker group finds them."""
    return locate(job.storage_path).child(job.run_name).child("kept").uri


def _root_cause(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    last = [line for line in text if line.strip()]
    return last[-1] if last else type(error).__name__
