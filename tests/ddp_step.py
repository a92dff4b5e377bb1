"""Helper process for the DDP tests: optimizer updates on fixed examples, then save the result.

    python tests/ddp_step.py DATASET OUT RANK WORLD INIT_FILE JOB [JOB ...]

A JOB is ``MODEL`` or ``MODEL:MODE`` (MODE: diverge, accumulate or packed); the jobs run one
after another in the same processes (one start-up and one process group for all of them),
each from the same seed and a freshly built model.  Rank r takes examples r, r+W, ... of a
fixed global batch, so any world size sees the same global batch; the parameters after the
updates must not depend on the world size.  Each rank saves its own parameters
(``OUT-MODEL-MODE.rank<r>``, MODE ``plain`` for none), so DDP keeping the ranks in step is
checked too.
With ``diverge`` the learning rate makes the loss NaN within a few updates: each rank saves
the update at which it stopped and the reason.  With ``accumulate`` each rank's share is split
in two batches accumulated into one update (1 worker × 2 batches must equal 2 workers × 1).
With ``packed`` each rank's share is one batch of packed rows (``batching.pack``)."""

import sys

import torch
import torch.distributed as dist
from helpers import smoke_dims

from platform.data import dataset as ds
from platform.data.packing import collate_packed
from platform.training.config import load_train_config
from platform.training.context import Context
from platform.training.step import Diverged, build_training, train_step

GLOBAL_BATCHES = [list(range(0, 24)), list(range(24, 40))]
MODEL_SETTINGS = {  # the smoke size without dropout: an update depends on its examples, not on a rank's draws
    "dbsa": smoke_dims("dbsa", dropout=0.0, p_enc=1, p_dec=2),
    "tree2seq": smoke_dims("tree2seq", dropout=0.0),
    "hier_tree_gru": smoke_dims("hier_tree_gru", dropout=0.0),
    "gumbel_tree": smoke_dims("gumbel_tree", dropout=0.0),
}


def config_of(model: str, diverge: bool = False):
    optim = {"lr": 1e30, "warmup_steps": 0, "clip_norm": 0.0} if diverge else {"warmup_steps": 2}
    return load_train_config({"model": {"name": model, **MODEL_SETTINGS[model]}, "optim": optim})


def saved_as(out: str, job: str, rank: int) -> str:
    """Where rank ``rank`` saves what ``job`` left (``out`` as given to ``main``)."""
    model_name, _, mode = job.partition(":")
    return f"{out}-{model_name}-{mode or 'plain'}.rank{rank}"


def main(dataset: str, out: str, rank: int, world: int, init_file: str, *jobs: str) -> None:
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    ctx = Context.from_torch_distributed(torch.device("cpu"))
    examples = ds.read_examples(dataset, "train")
    for job in jobs:
        model_name, _, mode = job.partition(":")
        torch.save(run(examples, rank, world, ctx, model_name, mode), saved_as(out, job, rank))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def run(examples, rank: int, world: int, ctx: Context, model_name: str, mode: str) -> dict:
    torch.manual_seed(1)
    config = config_of(model_name, mode == "diverge")
    model, optimizer, scheduler = build_training(config, 1000, 1000, ctx)
    unused = getattr(model, "may_skip_parameters", False)  # as the Ray worker wraps it
    wrapped = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=unused) if world > 1 else model
    if mode == "diverge":
        batches = [list(range(start, start + 16)) for start in range(0, 320, 16)]
        for step, indices in enumerate(batches, start=1):
            try:
                train_step(wrapped, optimizer, scheduler, examples.collate(indices[rank::world]), config, ctx)
            except Diverged as error:
                return {"step": step, "reason": str(error)}
        return {"step": None, "reason": ""}
    for indices in GLOBAL_BATCHES:
        share = indices[rank::world]
        if mode == "accumulate":
            batches = [examples.collate(share[0::2]), examples.collate(share[1::2])]
        else:
            batches = collate_packed(examples, share, 32) if mode == "packed" else examples.collate(share)
        train_step(wrapped, optimizer, scheduler, batches, config, ctx)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], *sys.argv[6:])
