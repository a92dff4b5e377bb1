"""Where a process trains: rank, world size, device and the sum over ranks; seeding."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

@dataclass
class Context:
    """Where this process trains: rank, world size, device, and how to sum across ranks."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    all_reduce: Callable[[Tensor], Tensor] = lambda t: t  # sum over ranks (identity alone)
    bf16: bool | None = None  # None: autocast on CUDA only (platform.bench's --bf16/--no-bf16 sets it)

    @property
    def autocast(self) -> bool:
        """bf16 autocast of the forward pass: on CUDA unless ``bf16`` says otherwise."""
        return self.device.type == "cuda" if self.bf16 is None else self.bf16

    @classmethod
    def from_torch_distributed(cls, device: torch.device) -> "Context":
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return cls(device=device)

        def reduce(tensor: Tensor) -> Tensor:
            tensor = tensor.clone()
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            return tensor

        return cls(rank=dist.get_rank(), world_size=dist.get_world_size(), device=device, all_reduce=reduce)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)
