"""Where a process trains: rank, world size, device and the sum over ranks; seeding."""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

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
    precision: Literal["fp32", "bf16", "fp16"] | None = None  # None: by the device (``precision_for``)
    scaler: torch.amp.GradScaler | None = None  # fp16's loss scaling (``with_precision`` makes it)

    @property
    def amp_dtype(self) -> torch.dtype | None:
        """The autocast dtype of the forward pass (None: float32 throughout)."""
        precision = self.precision or precision_for(self.device)
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)

    @property
    def autocast(self) -> bool:
        return self.amp_dtype is not None

    def with_precision(self, setting: str) -> Context:
        """This context at the config's ``precision`` (``auto``: by the device), with a gradient
        scaler for fp16, whose small exponent range would flush small gradients to zero."""
        precision = chosen_precision(setting, self.device)
        scaler = torch.amp.GradScaler(self.device.type) if precision == "fp16" else None
        return dataclasses.replace(self, precision=precision, scaler=scaler)

    @classmethod
    def from_torch_distributed(cls, device: torch.device) -> Context:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return cls(device=device)

        def reduce(tensor: Tensor) -> Tensor:
            tensor = tensor.clone()
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            return tensor

        return cls(rank=dist.get_rank(), world_size=dist.get_world_size(), device=device, all_reduce=reduce)


def precision_for(device: torch.device) -> Literal["fp32", "bf16", "fp16"]:
    """Mixed precision by what the device has: bf16 on a GPU that computes in it (Ampere and
    later), fp16 with loss scaling on older GPUs (T4, V100), float32 on the CPU."""
    if device.type != "cuda":
        return "fp32"
    return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"


def chosen_precision(setting: str, device: torch.device) -> Literal["fp32", "bf16", "fp16"]:
    """The config's ``precision``: ``auto`` chooses by the device, any other is forced."""
    return precision_for(device) if setting == "auto" else setting


def set_deterministic(on: bool) -> None:
    """``TrainConfig.deterministic``: PyTorch's deterministic kernels (the relative terms'
    scatter-add and the gathers' gradients add in a fixed order instead of with atomics; an
    operation with no deterministic CUDA kernel raises instead of varying), cuBLAS with the fixed
    workspace it needs for that (set before the process's first cuBLAS call: the model is built
    after this), cuDNN's deterministic RNN kernels and no benchmark-chosen algorithms.  Off
    restores PyTorch's defaults, so one process may train both ways."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.deterministic = on
    torch.backends.cudnn.benchmark = False


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)
