"""One optimizer update: Adam with the inverse-square-root schedule, the loss of
``platform.training.loss``, gradient clipping, mixed precision by the device (bf16 autocast, or
fp16 with loss scaling; ``Context.with_precision``) (docs/architecture.md).

Imports torch, ``models/`` and the configs only, so ``benchmarks.speed`` times exactly this step.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from models import build_model
from platform.training.config import OptimConfig, TrainConfig
from platform.training.context import Context, seed_everything, set_deterministic
from platform.training.loss import combine, forward, loss_counts, loss_sums, teacher_forcing

if TYPE_CHECKING:
    from platform.data.tensors import Batch


def inverse_sqrt_schedule(warmup_steps: int) -> Callable[[int], float]:
    """Vaswani et al. §5.3, scaled to peak 1: min(step / warmup, sqrt(warmup / step))."""

    def factor(step: int) -> float:
        step = max(step, 1)
        if warmup_steps == 0:
            return 1.0 / math.sqrt(step)
        return min(step / warmup_steps, math.sqrt(warmup_steps / step))

    return factor


def constant_schedule(warmup_steps: int) -> Callable[[int], float]:
    """The learning rate itself after a linear warm-up (none when ``warmup_steps`` is 0)."""

    def factor(step: int) -> float:
        return min(max(step, 1) / warmup_steps, 1.0) if warmup_steps else 1.0

    return factor


SCHEDULES = {"inverse_sqrt": inverse_sqrt_schedule, "constant": constant_schedule}


def build_optimizer(model: nn.Module, optim: OptimConfig):
    """The optimiser (Adam, or AdaDelta as Yang et al. train) and its schedule for ``model``'s parameters."""
    if optim.optimizer == "adadelta":
        optimizer = torch.optim.Adadelta(model.parameters(), lr=optim.lr, rho=optim.rho, eps=optim.eps,
                                         weight_decay=optim.weight_decay)
    else:  # fused: one kernel for all parameters on CUDA instead of a few per tensor (docs/performance.md)
        on_cuda = all(p.is_cuda for p in model.parameters())
        optimizer = torch.optim.Adam(model.parameters(), lr=optim.lr, betas=optim.betas, eps=optim.eps,
                                     weight_decay=optim.weight_decay, fused=on_cuda or None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, SCHEDULES[optim.schedule](optim.warmup_steps))
    return optimizer, scheduler


def build_training(config: TrainConfig, src_vocab: int, tgt_vocab: int, ctx: Context):
    """Model, optimizer and scheduler for ``config`` on ``ctx.device``, seeded."""
    set_deterministic(config.deterministic)
    seed_everything(config.seed)
    model = build_model(config.model, src_vocab, tgt_vocab).to(ctx.device)
    return (model, *build_optimizer(model, config.optim))


@functools.cache
def compiled_update(setting: str, fullgraph: bool = True) -> tuple[Callable, Callable]:
    """The update's compiled regions for ``TrainConfig.compile`` (``default`` or
    ``reduce-overhead``): a batch's loss (the forward pass, the token loss, the parse losses,
    their combination; its backward compiled with it by AOTAutograd, replayed as CUDA graphs
    under ``reduce-overhead``) and the gradient clipping.  Each is one graph: ``fullgraph``
    makes a graph break an error rather than a silent split (off for a DDP-wrapped model, whose
    wrapper breaks it, and for the recurrent and tree encoders, whose loops run a number of
    steps that depends on the batch).  The optimizer step is not traced:
    PyTorch's ``Optimizer.step`` breaks the graph on purpose (its ``_use_grad``), and on CUDA it
    is the fused Adam kernel already (``build_optimizer``).  Compiled once per shape until
    torch.compile makes a changing dimension dynamic; ``batching.fixed_shape`` keeps one."""
    mode = None if setting == "default" else setting
    return (torch.compile(_batch_loss, fullgraph=fullgraph, mode=mode),
            torch.compile(_clip, fullgraph=True))  # no CUDA graphs: they would copy every gradient in


def _clip(parameters: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Clips the gradients of ``parameters`` to a global 2-norm of ``max_norm``; returns the norm."""
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm)


def compile_count() -> int:
    """Graphs torch.compile has compiled in this process (recompilations included)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@dataclass
class StepResult:
    loss: float  # combined loss per target token (this rank's estimate)
    num_tokens: int  # global target tokens of the update
    grad_norm: float


class Diverged(FloatingPointError):
    """The loss became NaN/inf: training stops for good (a restart would diverge again)."""


def train_step(model: nn.Module, optimizer, scheduler, batches: Batch | Sequence[Batch], config: TrainConfig,
               ctx: Context) -> StepResult:
    """One optimizer update on ``batches``: this rank's share of the update, one batch or several
    accumulated (``BatchingConfig.update_freq``).

    Every loss term is divided by its count over the whole update (all ranks, all batches;
    ``loss.combine``), so the gradient does not depend on how the update is split into ranks and
    batches.  DDP synchronises only on the last batch's backward."""
    model.train()
    fullgraph = config.model.packable and not hasattr(model, "no_sync")  # the Transformer family, not DDP
    batch_loss, clip = compiled_update(config.compile, fullgraph) if config.compile != "off" else (_batch_loss, _clip)
    with _phase("to device"):
        batches = [batch.to(ctx.device, non_blocking=True)  # overlaps the copy where the batch is pinned (CUDA)
                   for batch in ([batches] if not isinstance(batches, Sequence) else batches)]
        global_counts = ctx.all_reduce(sum(loss_counts(batch, config.model) for batch in batches))
    optimizer.zero_grad(set_to_none=True)
    total = nonfinite = torch.zeros((), device=ctx.device)
    for index, batch in enumerate(batches):
        with _sync_gradients(model, index == len(batches) - 1), _phase("loss and backward"):
            loss, bad = batch_loss(model, batch, global_counts, config, ctx)
            (ctx.scaler.scale(loss) if ctx.scaler is not None else loss).backward()
        total, nonfinite = total + loss.detach().float(), torch.maximum(nonfinite, bad)
    with _phase("clip"):
        # every rank learns how many saw a non-finite loss, so all stop at the same update (a rank
        # raising alone would leave the others waiting in DDP's next collective)
        bad_ranks = ctx.all_reduce(nonfinite.reshape(1))
        if ctx.scaler is not None:  # fp16: clip the true gradients; an update whose gradients overflowed is skipped
            ctx.scaler.unscale_(optimizer)
        norm = clip([p for p in model.parameters() if p.grad is not None], config.optim.clip_norm or float("inf"))
    with _phase(WAIT_PHASE):
        # the update's one wait for the device: what it reports and whether it diverged, read together
        # before the optimizer step is queued (which then overlaps the next update's batch on the host)
        bad_count, total, tokens, norm = torch.stack([bad_ranks[0], total, global_counts[0], norm.float()]).tolist()
    if bad_count or not math.isfinite(total):
        raise Diverged(f"loss became {total} on {max(int(bad_count), 1)} of {ctx.world_size} rank(s)")
    with _phase("optimizer step"):
        if ctx.scaler is not None:
            ctx.scaler.step(optimizer)
            ctx.scaler.update()
        else:
            optimizer.step()
        scheduler.step()
    # this rank's loss × world size / global count: the global mean when the ranks' shares are even
    return StepResult(loss=total, num_tokens=int(tokens), grad_norm=norm)


def _batch_loss(model: nn.Module, batch: Batch, global_counts: torch.Tensor, config: TrainConfig,
                ctx: Context) -> tuple[torch.Tensor, torch.Tensor]:
    """Deguchi et al. eq. 18 for one batch, normalised by the update's global counts; and 1.0
    if a term of it is NaN/inf (else 0.0)."""
    tgt_in, tgt_out = teacher_forcing(batch)
    with torch.autocast(ctx.device.type, dtype=ctx.amp_dtype or torch.bfloat16, enabled=ctx.autocast):
        output = forward(model, batch, tgt_in)
    sums = loss_sums(output, batch, tgt_out, config.optim.label_smoothing, config.model)
    return (combine(sums, global_counts, config.model, ctx.world_size),
            sums.nonfinite(config.model.parse_supervision()))


# the host's part of an update, phase by phase, as torch.profiler sees it (``record_function``
# ranges named PHASE + the phase: nothing is recorded without a profiler); on a GPU the wait
# phase is the host idling until the device catches up, the rest is the host's own work
PHASE = "update: "
WAIT_PHASE = "wait for the device"
PHASES = ("to device", "loss and backward", "clip", WAIT_PHASE, "optimizer step")  # in an update's order


def _phase(name: str):
    return torch.profiler.record_function(PHASE + name)


def _sync_gradients(model: nn.Module, sync: bool):
    """DDP's ``no_sync`` for every batch of an update but the last (nothing outside DDP)."""
    return nullcontext() if sync or not hasattr(model, "no_sync") else model.no_sync()


class Throughput:
    """Target tokens per second over an epoch."""

    def __init__(self) -> None:
        self.tokens, self.start = 0, time.perf_counter()

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    @property
    def per_second(self) -> float:
        return self.tokens / max(time.perf_counter() - self.start, 1e-9)
