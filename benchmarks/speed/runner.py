"""Running the sections, checking the targets, and the command line of ``python -m benchmarks.speed``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import benchmarks.speed
from benchmarks.speed.common import (
    MFU_TARGET,
    RATIO_TARGETS,
    RAY_SECTIONS,
    REFERENCE,
    SECTIONS,
    TRANSFORMER_SIZES,
    TREE_SPEEDUP_TARGET,
    Settings,
    _fmt,
    device_info,
    finite,
    make_settings,
    median_ratio,
)
from benchmarks.speed.decode import bench_decode, print_decode
from benchmarks.speed.distributed import bench_ddp, print_ddp
from benchmarks.speed.models import bench_models, print_models
from benchmarks.speed.sweep import bench_sweep, print_sweep
from benchmarks.speed.trees import bench_trees, print_trees

# ------------------------------------------------------------------------------ targets


def evaluate_targets(report: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Every target with what was measured: met True/False, or None if not measured."""
    models = {k: v for k, v in report.get("models", {}).items() if isinstance(v, dict)}  # not {"error": ...}
    rates = {name: entry.get("tokens_per_s_rounds") for name, entry in models.items()}
    rates[REFERENCE] = report.get("reference", {}).get("tokens_per_s_rounds")
    targets: dict[str, Any] = {}
    for key, (model, against, minimum) in RATIO_TARGETS.items():
        measured = median_ratio(rates[model], rates[against]) if rates.get(model) and rates.get(against) else None
        met = None if measured is None else measured >= minimum
        targets[key] = {"target": minimum, "measured": measured, "met": met}
    for name, entry in report.get("trees", {}).items():
        if isinstance(entry, dict) and "speedup" in entry:
            targets[f"{name}_batched_vs_loop"] = {"target": TREE_SPEEDUP_TARGET, "measured": entry["speedup"],
                                                  "met": entry["met"]}
    targets["transformer_bf16_mfu"] = _mfu_target(models.get("transformer"), settings)
    return targets


def _mfu_target(entry: dict[str, Any] | None, settings: Settings) -> dict[str, Any]:
    mfu = entry.get("mfu") if entry else None
    applies = (settings.device.startswith("cuda") and settings.bf16 and settings.size == "paper"
               and settings.num_sentences * settings.length >= 16384 and mfu is not None)
    result = {"target": MFU_TARGET, "measured": mfu, "met": (mfu >= MFU_TARGET) if applies else None}
    if not applies:
        result["note"] = "measured only on a GPU with known peak, bf16, --size paper, ≥ 16k-token batches"
    return result


def print_targets(targets: dict[str, Any]) -> None:
    print("\ntargets")
    for key, entry in targets.items():
        print(f"  {key:<40} target {entry['target']:<6} measured {_fmt(entry['measured'], '.2f'):<8} "
              f"met {_fmt(entry['met'])}")


BENCHES: dict[str, Callable[[Settings], dict[str, Any]]] = {
    "models": bench_models, "decode": bench_decode, "trees": bench_trees, "ddp": bench_ddp, "sweep": bench_sweep}
PRINTERS: dict[str, Callable[[dict[str, Any]], None]] = {
    "models": print_models, "decode": print_decode, "trees": print_trees, "ddp": print_ddp, "sweep": print_sweep}


# ------------------------------------------------------------------------------ run


def run_benchmark(settings: Settings, sections: list[str]) -> dict[str, Any]:
    """Run ``sections`` in order; a section that fails is recorded as ``{"error": ...}``."""
    started = time.perf_counter()
    report: dict[str, Any] = {"device": device_info(settings), "config": dataclasses.asdict(settings),
                              "sections": sections, "seconds": {}}
    for name in sections:
        section_start = time.perf_counter()
        try:
            result = BENCHES[name](settings)
        except Exception as error:  # noqa: BLE001 - keep the other sections' numbers
            traceback.print_exc()
            result = {"error": f"{type(error).__name__}: {error}"}
        report["seconds"][name] = time.perf_counter() - section_start
        if name == "models" and "error" not in result:
            report.update(result)
        else:
            report[name] = result
        if "error" in result or "skipped" in result:
            print(f"\n{name}: {result.get('error') or result.get('skipped')}")
        else:
            PRINTERS[name](result)
        sys.stdout.flush()
    report["targets"] = evaluate_targets(report, settings)
    report["seconds"]["total"] = time.perf_counter() - started
    report["device"]["load_average_1min_at_end"] = os.getloadavg()[0]  # another workload skews the numbers
    print_targets(report["targets"])
    return report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed",
                                     description=benchmarks.speed.__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the model sections run")
    parser.add_argument("--out", metavar="FILE.json", help="write the results as JSON")
    parser.add_argument("--only", help=f"comma-separated sections (default all): {','.join(SECTIONS)}")
    parser.add_argument("--skip-ray", action="store_true", help=f"skip the Ray sections ({', '.join(RAY_SECTIONS)})")
    parser.add_argument("--quick", action="store_true",
                        help="small batches, few steps: a quick look, not a measurement")
    parser.add_argument("--size", choices=list(TRANSFORMER_SIZES),
                        help="model size (default small on CPU, paper on CUDA)")
    parser.add_argument("--tokens", type=int, help="target tokens per training batch (default 2048 CPU, 16384 CUDA)")
    parser.add_argument("--length", type=int, help="positions per sentence (default 32 CPU, 64 CUDA)")
    parser.add_argument("--vocab", type=int, help="source and target vocabulary (default 8000)")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                        help="bf16 autocast (default: on for CUDA)")
    parser.add_argument("--warmup", type=int, help="untimed steps per model")
    parser.add_argument("--steps", type=int, help="timed steps per model and round")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (medians over them)")
    parser.add_argument("--models", help="comma-separated models to time (default all)")
    parser.add_argument("--peak-flops", type=float,
                        help="the device's peak FLOP/s for MFU (default: known GPUs, bf16)")
    parser.add_argument("--threads", type=int,
                        help="torch CPU threads (default on CPU: 1, as OpenMP threads on a shared machine stall each "
                             "other; on CUDA: torch's)")
    return parser


def select_sections(only: str | None, skip_ray: bool) -> list[str]:
    sections = [s.strip() for s in only.split(",") if s.strip()] if only else list(SECTIONS)
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise ValueError(f"unknown section(s) {unknown}; available: {', '.join(SECTIONS)}")
    return [s for s in sections if not (skip_ray and s in RAY_SECTIONS)]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch sees no CUDA device")
    try:
        sections = select_sections(args.only, args.skip_ray)
        settings = make_settings(args.device, args.quick, size=args.size, tokens=args.tokens, length=args.length,
                                 vocab=args.vocab, bf16=args.bf16, warmup=args.warmup, steps=args.steps,
                                 rounds=args.rounds, peak_flops=args.peak_flops, threads=args.threads,
                                 models=tuple(args.models.split(",")) if args.models else None)
    except ValueError as error:
        parser.error(str(error))
    if settings.threads:
        torch.set_num_threads(settings.threads)
    device = device_info(settings)
    print(f"device {device['name']} ({settings.device}, {device['threads']} threads), torch {torch.__version__}, "
          f"size {settings.size}, bf16 {settings.bf16}, sections {','.join(sections)}")
    report = run_benchmark(settings, sections)
    if args.out:
        Path(args.out).write_text(json.dumps(finite(report), indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}")
    return 1 if any(isinstance(report.get(s), dict) and "error" in report[s] for s in sections) else 0
