"""What every benchmark section shares: settings, interleaved timing, the device, JSON output."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from models import MODELS

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("models", "decode", "trees", "ddp", "sweep")
RAY_SECTIONS = ("ddp", "sweep")
REFERENCE = "torch.nn.Transformer"

TRANSFORMER_SIZES = {
    "tiny": dict(num_encoder_layers=2, num_decoder_layers=2, d_model=64, num_heads=4, d_ff=256),
    "small": dict(num_encoder_layers=3, num_decoder_layers=3, d_model=256, num_heads=4, d_ff=1024),
    "paper": dict(num_encoder_layers=6, num_decoder_layers=6, d_model=512, num_heads=8, d_ff=2048),
}
RNN_SIZES = {  # bidirectional leaves: memory and decoder dim = 2 × d_hidden = the Transformers' d_model
    "tiny": dict(d_embed=64, d_hidden=32),
    "small": dict(d_embed=256, d_hidden=128),
    "paper": dict(d_embed=512, d_hidden=256),
}
RATIO_TARGETS = {  # name: (model, against, at least): the speed each model must keep relative to another
    "transformer_vs_torch_nn_transformer": ("transformer", REFERENCE, 0.9),
    "dbsa_vs_transformer": ("dbsa", "transformer", 0.85),
    "transformer_rel_vs_transformer": ("transformer_rel", "transformer", 0.6),
    "deprel_vs_transformer": ("deprel", "transformer", 0.6),
}
TREE_SPEEDUP_TARGET = 5.0  # batched tree encoder against its per-sentence loop
MFU_TARGET = 0.30  # the baseline in bf16 at d_model 512 with ≥ 16k-token batches on an H100/H200
PEAK_BF16_FLOPS = [  # dense bf16 FLOP/s by device name (first match wins: the specific names first)
    ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12), ("H200", 989e12), ("A100", 312e12),
]


# ------------------------------------------------------------------------------ settings


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything one benchmark run depends on (written into the JSON as ``config``)."""

    device: str = "cpu"
    size: str = "small"  # key of TRANSFORMER_SIZES / RNN_SIZES
    tokens: int = 2048  # target tokens per training batch
    length: int = 32  # source and target positions of every sentence (no padding)
    vocab: int = 8000
    bf16: bool = False  # torch.autocast(bfloat16) around the forward pass, as platform.training on CUDA
    warmup: int = 1  # untimed steps per model before the rounds
    steps: int = 1  # timed steps per model and round
    rounds: int = 3  # interleaved rounds; medians over them
    models: tuple[str, ...] = tuple(MODELS)
    decode_sentences: int = 16
    decode_length: int = 20
    beam: int = 4
    tree_batch: int = 64
    tree_dim: int = 256
    threads: int | None = 1  # torch CPU threads (None: torch's default); see DEFAULTS
    ddp_size: str = "cpu"  # platform.train size preset of the DDP model (cpu or smoke)
    ddp_threads: int = 1  # torch threads (and Ray CPUs) of every DDP worker, for 1 and 2 workers alike
    ddp_warmup: int = 2
    ddp_steps: int = 8
    sweep_samples: int = 2
    peak_flops: float | None = None  # overrides the device table (needed for MFU on other devices)

    @property
    def num_sentences(self) -> int:
        return max(1, self.tokens // self.length)


# CPU: one torch thread.  On a shared machine OpenMP threads that lose their core stall each
# other at every barrier (docs/performance.md): one thread keeps ratios stable; --threads N on a
# machine of your own.
DEFAULTS = {
    "cpu": {},
    "cuda": dict(size="paper", tokens=16384, length=64, bf16=True, warmup=3, steps=10, decode_sentences=64,
                 tree_dim=512, threads=None),
}
QUICK = dict(tokens=512, warmup=1, steps=1, rounds=2, decode_sentences=4, tree_batch=16, ddp_warmup=1, ddp_steps=3,
             ddp_size="smoke")


def make_settings(device: str, quick: bool = False, **overrides: Any) -> Settings:
    """The device's defaults, then ``--quick``'s, then explicit values (None = not given)."""
    values = {**DEFAULTS[device], **(QUICK if quick else {}), **{k: v for k, v in overrides.items() if v is not None}}
    settings = Settings(device=device, **values)
    if settings.length < 2:
        raise ValueError("--length must be at least 2 (BOS + one token)")
    unknown = sorted(set(settings.models) - set(MODELS))
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; available: {', '.join(MODELS)}")
    return settings


# ------------------------------------------------------------------------------ timing


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def interleaved_seconds(functions: dict[str, Callable[[], Any]], *, calls: int, rounds: int, warmup: int,
                        device: str) -> dict[str, list[float]]:
    """Seconds per call of every function, one value per round.  Within a round each function
    runs ``calls`` times back to back; the order rotates between rounds, so a slow spell on
    the machine hits every contender rather than one."""
    for function in functions.values():
        for _ in range(warmup):
            function()
    names = list(functions)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            synchronize(device)
            start = time.perf_counter()
            for _ in range(calls):
                functions[name]()
            synchronize(device)
            seconds[name].append((time.perf_counter() - start) / calls)
    return seconds


def median_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over rounds of numerator / denominator of the same round."""
    return statistics.median(a / b for a, b in zip(numerator, denominator))


# ------------------------------------------------------------------------------ device


def peak_flops(settings: Settings) -> float | None:
    """``--peak-flops``, else the dense bf16 peak of a known GPU, else None (no MFU)."""
    if settings.peak_flops:
        return settings.peak_flops
    if settings.device.startswith("cuda") and settings.bf16:
        name = torch.cuda.get_device_name(torch.device(settings.device))
        return next((peak for key, peak in PEAK_BF16_FLOPS if all(word in name for word in key.split())), None)
    return None


def device_info(settings: Settings) -> dict[str, Any]:
    info: dict[str, Any] = {"type": settings.device.split(":")[0], "torch": torch.__version__,
                            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
                            "load_average_1min": os.getloadavg()[0], "peak_flops": peak_flops(settings)}
    if settings.device.startswith("cuda"):
        info["name"] = torch.cuda.get_device_name(torch.device(settings.device))
    else:
        info["name"] = _cpu_name()
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform as stdlib_platform  # this package re-exports the standard library's names

    return stdlib_platform.processor() or stdlib_platform.machine()


# ------------------------------------------------------------------------------ Ray: DDP


SKIPPED_NO_RAY = {"skipped": "ray not installed"}


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _fmt(value: Any, spec: str = ",.0f") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return format(value, spec)


def finite(value: Any) -> Any:
    """``value`` with NaN/inf floats as None (strict JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value
