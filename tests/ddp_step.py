"""Helper process for the DDP test: two optimizer updates on fixed examples, then save the parameters.

    python tests/ddp_step.py DATASET OUT.pt RANK WORLD INIT_FILE

Rank r takes examples r, r+W, ... of a fixed global batch, so any world size sees the same
global batch; the parameters after the updates must not depend on the world size."""

import sys

import torch
import torch.distributed as dist

from platform.data import dataset as ds
from platform.training.config import load_train_config
from platform.training.context import Context
from platform.training.step import build_training, train_step

GLOBAL_BATCHES = [list(range(0, 24)), list(range(24, 40))]


def main(dataset: str, out: str, rank: int, world: int, init_file: str) -> None:
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    config = load_train_config({"model": {"name": "dbsa", "num_encoder_layers": 2, "num_decoder_layers": 2, "d_model": 32,
                                          "num_heads": 4, "d_ff": 64, "dropout": 0.0, "p_enc": 1, "p_dec": 2},
                                "optim": {"warmup_steps": 2}})
    ctx = Context.from_torch_distributed(torch.device("cpu"))
    examples = ds.read_examples(dataset, "train")
    model, optimizer, scheduler = build_training(config, 1000, 1000, ctx)
    wrapped = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    for indices in GLOBAL_BATCHES:
        train_step(wrapped, optimizer, scheduler, examples.collate(indices[rank::world]), config, ctx)
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
