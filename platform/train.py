"""``python -m platform.train``: one model trained with Ray Train (DDP) and tracked in MLflow.

    python -m platform.train --model dbsa                      # demo corpus, CPU-sized model
    python -m platform.train --model transformer --smoke       # tiny model, a few steps
    python -m platform.train --model deprel --data data/ja-en --set model.l_clip=3 --workers 2

A Ray Train V2 ``TorchTrainer`` runs ``--workers`` DDP workers (gloo on CPU, nccl with GPUs);
each reads its shard of the training data, rank 0 evaluates on the dev set every epoch,
writes a checkpoint through Ray and the metrics to MLflow.  A failed worker group restarts
from the last checkpoint (``--max-failures``).  Run from the repository root.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platform import config as config_io
from platform import dataset as ds
from platform import recipes
from platform import tracking
from platform.errors import UserError, run_cli
from platform.training import CHECKPOINT_FILE, RUN_PRESETS, TrainConfig, load_train_config, model_defaults

ROOT = Path(__file__).resolve().parents[1]
DEMO_DIR = Path("data") / "demo"
RUNTIME_EXCLUDES = [".git", "data", "runs", "mlruns", "*.db", ".venv", "venv", ".ci-venv", "__pycache__"]


# ------------------------------------------------------------------------------ resolution


@dataclass(frozen=True)
class Job:
    """Everything a training run needs besides the config: where and how it runs."""

    dataset_dir: Path
    workers: int
    gpus_per_worker: float
    cpus_per_worker: float
    experiment: str
    tracking_uri: str
    run_name: str
    storage_path: str  # a directory, or shared storage such as s3://bucket/prefix
    max_failures: int


def resolve_config(model: str, size: str, config_file: str | None, overrides: Sequence[str],
                   max_epochs: int | None = None, recipe: str | None = None) -> TrainConfig:
    """Preset, recipe and size defaults, then the YAML file, then ``--set``; validated strictly."""
    data: dict[str, Any] = {"model": model_defaults(model, size, recipe)}
    _merge(data, copy.deepcopy(RUN_PRESETS[size]))
    if config_file:
        _merge(data, config_io.read_yaml_mapping(config_file))
    for override in overrides:
        key, value = config_io.parse_override(override)
        _merge(data, _nested(key, value))
    if max_epochs is not None:
        data["max_epochs"] = max_epochs
    if data["model"].get("name", model) != model:
        raise UserError(f"--model {model} but the config names model {data['model']['name']!r}")
    data["model"]["name"] = model
    return load_train_config(data)


def _nested(key: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    node = out
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def resolve_data(data: str, quiet: bool = False) -> Path:
    """``demo`` → the built-in corpus, prepared once into ./data/demo; else a prepared directory."""
    if data == "demo":
        from platform import demo
        from platform.prepare import PrepareConfig, prepare_demo
        from platform.subwords import SubwordConfig

        config = PrepareConfig(src_lang=demo.SRC_LANG, tgt_lang=demo.TGT_LANG, subwords=SubwordConfig(vocab_size=4000))
        prepare_demo(DEMO_DIR, config, demo.DemoConfig(), progress=False,
                     log=(lambda m: None) if quiet else (lambda m: print(m, file=sys.stderr)))
        return DEMO_DIR.resolve()
    directory = Path(data)
    ds.read_meta(directory)  # a clear error if it is not a prepared dataset
    for split in ("train", "dev"):
        if not ds.split_path(directory, split).exists():
            raise UserError(f"{directory}: no {split}.parquet; training needs train and dev splits")
    return directory.resolve()


# ------------------------------------------------------------------------------ the worker


def train_loop_per_worker(loop: dict[str, Any]) -> None:
    """Ray Train entry point on every worker: build the context and hooks, then ``fit``."""
    import ray.train
    import ray.train.torch
    import torch

    from platform.fit import Dataset, fit
    from platform.training import Context

    config = load_train_config(loop["config"])
    torch.set_num_threads(max(1, min(int(loop["cpus_per_worker"]), os.cpu_count() or 1)))  # Ray pins 1 thread otherwise
    ctx = Context.from_torch_distributed(ray.train.torch.get_device())
    dataset = Dataset.open(loop["dataset_dir"], with_dev=ctx.rank == 0)
    hooks = RayHooks(ctx.rank, loop["tracking_uri"], loop["run_id"], config, loop["dataset_dir"])
    try:
        fit(config, dataset, ctx, hooks, log=_write_line)
        hooks.finish()
    finally:
        if hooks.logger is not None:
            hooks.logger.close()  # a last try at what an outage held back; says what is lost


def _write_line(line: str) -> None:
    """Progress lines from rank 0 (not ``print``: Ray Train patches it and would log them twice)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class RayHooks:
    """Ray Train around ``fit``: DDP wrapping, checkpoints through ``ray.train.report``,
    resuming from ``ray.train.get_checkpoint()``, and rank 0's MLflow logging."""

    def __init__(self, rank: int, tracking_uri: str, run_id: str, config: TrainConfig, dataset_dir: str):
        self.rank, self.config, self.dataset_dir = rank, config, dataset_dir
        self.logger = tracking.RunLogger(tracking_uri, run_id) if rank == 0 else None
        if self.logger is not None:  # where rank 0 ran (a sweep spreads trials over the cluster's nodes)
            import platform as _platform

            import ray

            self.logger.tag("node_id", ray.get_runtime_context().get_node_id())
            self.logger.tag("hostname", _platform.node())
            reason = self.logger.get_tag("diverged")
            if reason:  # Ray restarted a worker group that diverged: it would diverge again
                from platform.training import Diverged

                self.logger.tag("retry_refused", "the run diverged; a restart would diverge again")
                raise Diverged(reason)
        self.workdir = Path(tempfile.mkdtemp(prefix="nmt-worker-"))
        self.history: list[dict[str, float]] = []

    def resume(self) -> dict | None:
        import ray.train

        from platform.training import load_checkpoint

        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return None
        with checkpoint.as_directory() as directory:
            state = load_checkpoint(Path(directory) / CHECKPOINT_FILE)
        self.history = list(state["progress"]["history"])
        if self.logger is not None:  # visible in MLflow: this run survived a failure
            restarts = int(self.logger.get_tag("restarts") or 0) + 1
            self.logger.tag("restarts", str(restarts))
            self.logger.tag("resumed_from_epoch", str(state["progress"]["epoch"]))
            self._relog_missing_epochs()
        return state

    def _relog_missing_epochs(self) -> None:
        """Epochs in the checkpoint whose metrics never reached MLflow (an outage before the
        failure) are logged now, so the run's curves have no gap."""
        try:
            logged = {int(m.step) for m in self.logger.client.get_metric_history(self.logger.run_id, "epoch")}
        except Exception:  # noqa: BLE001 - unreachable: the buffered logger will catch up anyway
            logged = set()
        for metrics in self.history:
            if int(metrics["epoch"]) not in logged:
                self.logger.metrics(metrics, step=int(metrics["epoch"]))

    def diverged(self, reason: str) -> None:
        if self.logger is not None:
            self.logger.tag("diverged", reason)

    def wrap(self, model):
        import ray.train.torch

        if self.logger is not None:
            self.logger.metrics({"num_parameters": float(sum(p.numel() for p in model.parameters()))}, step=0)

        from models.rnn import RecurrentTranslator

        # tree encoders may leave a module unused in a batch (e.g. only one-word sentences)
        unused = isinstance(model, RecurrentTranslator)
        return ray.train.torch.prepare_model(model, move_to_device=False, parallel_strategy="ddp",
                                             parallel_strategy_kwargs={"find_unused_parameters": unused})

    def report(self, metrics, state, evaluation, is_best) -> None:
        import ray.train

        if self.rank != 0:
            ray.train.report(metrics)
            return
        self.history.append(metrics)
        self._log(metrics, state, evaluation, is_best)
        from platform.fit import write_temp_checkpoint

        directory = write_temp_checkpoint(state)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(str(directory)))

    def _log(self, metrics, state, evaluation, is_best) -> None:
        from platform import plots
        from platform.training import save_checkpoint

        epoch = int(metrics["epoch"])
        self.logger.metrics(metrics, step=epoch)
        plots.learning_curves(self.history, self.workdir / "learning_curves.png")
        self.logger.artifact(self.workdir / "learning_curves.png", "plots")
        if evaluation is not None:
            self.logger.text("\n".join(evaluation.hypotheses) + "\n", f"dev_hypotheses/epoch_{epoch:03d}.txt")
            self.logger.tag("sacrebleu_signature", evaluation.signature)
        if is_best:
            save_checkpoint(state, self.workdir / "best" / CHECKPOINT_FILE)
            self.logger.artifact(self.workdir / "best" / CHECKPOINT_FILE, "best")
            self.logger.tag("best_epoch", str(epoch))
            if evaluation is not None:
                self.logger.text("\n".join(evaluation.hypotheses) + "\n", "dev_hypotheses/best.txt")

    def finish(self) -> None:
        if self.rank == 0 and self.logger is not None:
            from platform.diagnostics import log_parse_heat_map

            log_parse_heat_map(self.logger, self.workdir / "best" / CHECKPOINT_FILE, self.dataset_dir, self.workdir)
            for _ in range(3):  # a tracking outage at the very end: a few more tries (close() reports the rest)
                if self.logger.flush(force=True):
                    return
                time.sleep(10)


# ------------------------------------------------------------------------------ the driver


def storage_uri(path: str) -> str:
    """Local directories become absolute paths; URIs (s3://, gs://, ...) stay as they are."""
    return path if "://" in path else str(Path(path).resolve())


def start_ray(address: str | None = None) -> None:
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return
    ray.init(**ray_init_kwargs(address), log_to_driver=True, logging_level="WARNING")


def ray_init_kwargs(address: str | None, num_cpus: int | None = None) -> dict:
    """How the CLIs start or join Ray: the repository as working_dir; a local cluster's
    dashboard listens on 127.0.0.1 only (reach it through ``ssh -L 8265:127.0.0.1:8265``)."""
    kwargs = {"address": address, "runtime_env": {"working_dir": str(ROOT), "excludes": RUNTIME_EXCLUDES}}
    if address is None:
        kwargs["dashboard_host"] = "127.0.0.1"
        if num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
    return kwargs


def run(config: TrainConfig, job: Job, *, parent_run_id: str | None = None, tags: dict[str, str] | None = None,
        ray_address: str | None = None, callbacks: list | None = None, reuse_tag: str | None = None) -> str:
    """Open the MLflow run, train with Ray Train, close the run; returns the run id.

    With ``reuse_tag`` (a key of ``tags``, e.g. ``trial_id``) a run that already carries that
    tag is reopened instead of creating a duplicate (a retried trial resumes its own run).
    Raises ``TrainingFailed`` (after marking the run FAILED) if the workers failed for good."""
    meta = ds.read_meta(job.dataset_dir)
    config_yaml = config_io.dump_yaml(config)
    extra = {"model": config.model.name, "workers": job.workers, "gpus_per_worker": job.gpus_per_worker,
             "git_commit": tracking.git_commit(), "dataset_sha256": tracking.dataset_sha256(meta),
             "data": str(job.dataset_dir)}
    tags = {"model": config.model.name, **(tags or {})}
    start_ray(ray_address)
    tracking.start_relay(job.tracking_uri)  # no-op if it runs already or the store is remote
    run_id = tracking.find_run(job.tracking_uri, job.experiment, {reuse_tag: tags[reuse_tag]}) if reuse_tag else None
    if run_id is None:
        run_id = tracking.start_run(job.tracking_uri, job.experiment, job.run_name, tracking.run_params(config, extra),
                                    tags, config_yaml, parent_run_id)
    try:
        _fit_with_ray(config, job, run_id, callbacks or [])
    except BaseException as error:
        tracking.end_run(job.tracking_uri, run_id, error=error, only_if_running=True)
        raise
    tracking.end_run(job.tracking_uri, run_id, only_if_running=True)
    return run_id


class TrainingFailed(UserError):
    pass


def _fit_with_ray(config: TrainConfig, job: Job, run_id: str, callbacks: list):
    import ray.train
    from ray.train.torch import TorchTrainer

    use_gpu = job.gpus_per_worker > 0
    resources = {"CPU": job.cpus_per_worker, **({"GPU": job.gpus_per_worker} if use_gpu else {})}
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"config": config_io.to_dict(config), "dataset_dir": str(job.dataset_dir),
                           "tracking_uri": job.tracking_uri, "run_id": run_id, "cpus_per_worker": job.cpus_per_worker},
        scaling_config=ray.train.ScalingConfig(num_workers=job.workers, use_gpu=use_gpu, resources_per_worker=resources),
        run_config=ray.train.RunConfig(
            name=job.run_name, storage_path=str(job.storage_path),
            failure_config=ray.train.FailureConfig(max_failures=job.max_failures),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="dev_bleu",
                                                         checkpoint_score_order="max"),
            logging_config=ray.train.LoggingConfig(log_level="ERROR"),  # our own progress lines only
            callbacks=callbacks),
    )
    try:
        return trainer.fit()
    except ray.train.TrainingFailedError as error:
        raise TrainingFailed(f"training failed: {_root_cause(error)}") from None


def _root_cause(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    last = [line for line in text if line.strip()]
    return last[-1] if last else type(error).__name__


# ------------------------------------------------------------------------------ CLI


def default_cpus_per_worker(workers: int) -> float:
    """Share the cluster's CPUs (or this machine's cores) between the workers, at least one each."""
    import ray

    total = ray.cluster_resources().get("CPU", os.cpu_count() or 1) if ray.is_initialized() else (os.cpu_count() or 1)
    return float(max(1, int(total) // workers))


def build_parser() -> argparse.ArgumentParser:
    from models import MODELS

    parser = argparse.ArgumentParser(prog="python -m platform.train", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="recipes (each paper's table rows, platform/recipes.py):\n" + recipes.describe())
    parser.add_argument("--model", choices=list(MODELS), help="the architecture to train (or give --recipe)")
    parser.add_argument("--recipe", choices=list(recipes.RECIPES), metavar="RECIPE",
                        help="a paper's configuration of a table row (sets the model; default: the model's own "
                             "paper row); one of: " + ", ".join(recipes.RECIPES))
    parser.add_argument("--data", default="demo", help="'demo' (built-in synthetic corpus) or a prepared dataset directory")
    parser.add_argument("--config", metavar="YAML", help="a config file (sections model, batching, optim, eval, ...)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config value, e.g. --set model.p_enc=3 --set optim.lr=5e-4 (repeatable)")
    parser.add_argument("--size", choices=["cpu", "paper"], default="cpu",
                        help="model size defaults: cpu (small, the default) or paper (6+6 layers, d 512)")
    parser.add_argument("--workers", type=int, default=1, help="DDP workers (default 1)")
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, help="GPUs per worker (0 = CPU with gloo)")
    parser.add_argument("--cpus-per-worker", type=float, default=0.0,
                        help="CPUs per worker, also its torch threads (default: this machine's cores / workers)")
    parser.add_argument("--max-epochs", type=int, help="number of epochs (default 10; smoke 2)")
    parser.add_argument("--smoke", action="store_true", help="a tiny model and a few steps, for a quick check")
    parser.add_argument("--experiment", default="syntax-nmt", help="MLflow experiment name (default syntax-nmt)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)")
    parser.add_argument("--name", help="run name; rerunning with the same name resumes its Ray checkpoints")
    parser.add_argument("--storage-path", default="runs", help="where Ray keeps checkpoints (shared storage on a cluster)")
    parser.add_argument("--max-failures", type=int, default=2, help="restarts of a failed worker group (default 2)")
    parser.add_argument("--address", help="Ray cluster address (default: start a local one, or 'auto')")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.workers < 1:
        raise UserError("--workers must be at least 1")
    if not (args.model or args.recipe):
        raise UserError("give --model NAME or --recipe NAME (see --help)")
    model = args.model or recipes.get_recipe(args.recipe).model
    recipe, _ = recipes.recipe_for(model, args.recipe)
    config = resolve_config(model, "smoke" if args.smoke else args.size, args.config, args.overrides, args.max_epochs,
                            recipe)
    if args.print_config:
        print(config_io.dump_yaml(config), end="")
        return 0
    job = Job(dataset_dir=resolve_data(args.data), workers=args.workers, gpus_per_worker=args.gpus_per_worker,
              cpus_per_worker=args.cpus_per_worker or default_cpus_per_worker(args.workers), experiment=args.experiment,
              tracking_uri=tracking.resolve_tracking_uri(args.tracking_uri),
              run_name=args.name or f"{model}-{uuid.uuid4().hex[:8]}", storage_path=storage_uri(args.storage_path),
              max_failures=args.max_failures)
    run_id = run(config, job, ray_address=args.address, tags={"recipe": recipe})
    print(f"finished: MLflow run {run_id} in experiment {job.experiment!r} ({job.tracking_uri})")
    return 0


if __name__ == "__main__":
    run_cli(main)
