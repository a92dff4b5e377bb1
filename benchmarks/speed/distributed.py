"""``ddp``: Ray Train on the demo corpus with the platform's own ``train_step``: 1 against 2 workers."""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import torch

from benchmarks.speed.common import SKIPPED_NO_RAY, Settings, ray_available


def ddp_worker(loop: dict[str, Any]) -> None:
    """Ray Train worker: the platform's ``train_step`` under DDP on demo batches (each rank its
    share, as ``training.loop.fit``), ``warmup`` untimed steps, then ``steps`` timed ones."""
    import ray.train
    import ray.train.torch

    from platform.data import dataset as ds
    from platform.data.batching import ShardedBatches
    from platform.training.context import Context
    from platform.training.step import build_training, train_step

    torch.set_num_threads(loop["threads"])
    config = loop["config"]  # the typed TrainConfig, as launch.driver passes it
    ctx = Context.from_torch_distributed(ray.train.torch.get_device())
    dataset_dir = Path(loop["dataset_dir"])
    vocab = ds.read_meta(dataset_dir)["vocab_size"]
    model, optimizer, scheduler = build_training(config, vocab["src"], vocab["tgt"], ctx)
    model = ray.train.torch.prepare_model(model, move_to_device=False, parallel_strategy="ddp")
    sampler = ShardedBatches(ds.PreparedDataset.open(dataset_dir, with_dev=False).train, config.batching, rank=ctx.rank,
                             world_size=ctx.world_size)
    batches = _epoch_after_epoch(sampler)
    first_step = time.time()  # everything before this is start-up
    for _ in range(loop["warmup"]):
        train_step(model, optimizer, scheduler, next(batches), config, ctx)
    sentences, tokens, start = torch.zeros(1, dtype=torch.float64), 0, time.perf_counter()
    for _ in range(loop["steps"]):
        batch = next(batches)
        tokens += train_step(model, optimizer, scheduler, batch, config, ctx).num_tokens  # all ranks' tokens
        sentences += batch.num_sentences  # this rank's sentences (packed: several per row)
    elapsed = time.perf_counter() - start
    metrics = {"samples_per_s": float(ctx.all_reduce(sentences)[0]) / elapsed, "tokens_per_s": tokens / elapsed,
               "first_step_unix": first_step}
    if ctx.rank != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as scratch:  # Train V2 keeps only metrics that come with a checkpoint
        Path(scratch, "metrics.json").write_text(json.dumps(metrics))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(scratch))


def _epoch_after_epoch(sampler):
    while True:
        yield from sampler  # one epoch; the sampler moves on to the next


def bench_ddp(settings: Settings) -> dict[str, Any]:
    """1 against 2 Ray Train DDP workers sharing this machine's cores (the platform's default)."""
    if not ray_available():
        return dict(SKIPPED_NO_RAY)
    import ray

    from platform.data.builtin import resolve_dataset
    from platform.launch.cluster import start_ray
    from platform.training.config import resolve_config

    dataset_dir = resolve_dataset("demo", quiet=True)
    config = resolve_config("transformer", settings.ddp_size)
    start_ray()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ddp-") as storage:
            runs = {f"workers_{w}": _ddp_fit(ddp_worker, w, config, dataset_dir, storage, settings) for w in (1, 2)}
    finally:
        ray.shutdown()
    one, two = runs["workers_1"], runs["workers_2"]
    return {**runs, "model": f"transformer ({settings.ddp_size} size)", "data": "demo",
            "max_tokens_per_worker_batch": config.batching.max_tokens,
            "speedup_2_vs_1": two["samples_per_s"] / one["samples_per_s"]}


def _ddp_fit(worker, workers: int, config, dataset_dir: Path, storage: str, settings: Settings) -> dict[str, Any]:
    import ray.train
    from ray.train.torch import TorchTrainer

    from platform.launch.process_group import NodeBoundTorchConfig

    cpus = settings.ddp_threads
    trainer = TorchTrainer(
        worker,
        train_loop_config={"config": config, "dataset_dir": str(dataset_dir), "threads": cpus,
                           "warmup": settings.ddp_warmup, "steps": settings.ddp_steps},
        scaling_config=ray.train.ScalingConfig(num_workers=workers, use_gpu=False, resources_per_worker={"CPU": cpus}),
        torch_config=NodeBoundTorchConfig(),  # as platform.train trains
        run_config=ray.train.RunConfig(name=f"bench-ddp-{workers}-{uuid.uuid4().hex[:6]}", storage_path=storage,
                                       logging_config=ray.train.LoggingConfig(log_level="ERROR")))
    started = time.time()
    metrics = trainer.fit().metrics
    return {"workers": workers, "cpus_per_worker": cpus, "samples_per_s": metrics["samples_per_s"],
            "tokens_per_s": metrics["tokens_per_s"],
            "trainer_start_to_first_step_s": metrics["first_step_unix"] - started, "wall_s": time.time() - started}


def print_ddp(result: dict[str, Any]) -> None:
    print(f"\nRay Train DDP, {result['model']} on the {result['data']} corpus")
    print(f"{'workers':<10}{'CPUs each':>10}{'samples/s':>11}{'tokens/s':>10}{'start→1st step s':>18}")
    for key in ("workers_1", "workers_2"):
        entry = result[key]
        print(f"{entry['workers']:<10}{entry['cpus_per_worker']:>10}{entry['samples_per_s']:>11.1f}"
              f"{entry['tokens_per_s']:>10.0f}{entry['trainer_start_to_first_step_s']:>18.1f}")
    print(f"2 workers vs 1: {result['speedup_2_vs_1']:.2f}x")
