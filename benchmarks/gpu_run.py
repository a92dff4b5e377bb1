"""The platform's training loop and the study of the papers on one GPU, in one prepared run
(docs/performance.md, "Compiled training in the real loop"; docs/results.md, "On a GPU").

    python -m benchmarks.gpu_run carry                      # here, first: the wheels, test pair and dataset it carries
    python -m benchmarks.gpu_run all --out-dir OUT          # on the GPU machine: loop, then study, in --minutes
    python -m benchmarks.gpu_run loop --out-dir OUT         # paper-size MFU in the real loop: eager vs compiled
    python -m benchmarks.gpu_run study --out-dir OUT        # the study's rows x seeds, all at once on the GPU
    python -m benchmarks.gpu_run table      # the docs' GPU tables from every file in benchmarks/gpu_results/

``loop`` trains each (row, compile mode) for ``--warmup`` + ``--updates`` updates through
``platform.training.loop.fit`` itself (prefetch thread, pinned batches, ``train_step``, reports),
each in a process of its own, and takes the target tokens/s of the updates after the warm-up from
the loop's own report.  Model FLOPs per target token are the baseline Transformer's work on the
epoch's real sentences (``transformer_train_flops`` per sentence: padding and the masked parts of
packed rows are not counted), so MFU = tokens/s x FLOPs per token / the GPU's dense bf16 peak.

``study`` trains what the results files lack (``study_plan``) with ``benchmarks/study.py``'s
configs at its size and budget (one process per run, all at once on the GPU, float32 as on the
CPU) and decodes the test set as the CPU study does: the best checkpoint, the last validations'
weights averaged, and the baseline as the Omote rows decode.  Each call writes one results file
into ``--out-dir`` (``benchmarks.gpu_results``), which goes into ``benchmarks/gpu_results/``;
``table`` (here, on the CPU) builds the docs' GPU sections from all of them.  Needs torch,
pyarrow, sentencepiece and sacrebleu, not Ray, MLflow or Optuna (``preflight``; ``carry``);
``GPU_RUN_DEVICE=cpu`` dry-runs it on a CPU, or runs the study there for the record: a results
file of device ``cpu``, pooled with the CPU's only and set beside the GPU's (``device_difference``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from benchmarks import gpu_results, study  # both standard library only at import

STARTED = time.time()  # the call's --minutes count from here: the preflight's imports are in them
ROOT = Path(__file__).resolve().parents[1]
THIS = [sys.executable, "-m", "benchmarks.gpu_run"]  # this benchmark again, in a process of its own

DEVICE = os.environ.get("GPU_RUN_DEVICE", "cuda")
HERE = "cpu" if DEVICE == "cpu" else "gpu"  # the device kind whose results files a study call adds to
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense bf16 FLOP/s by the datasheets
LOOP_ROWS = ["deguchi2019/baseline", "deguchi2019/enc+dec", "omote2019/rel", "omote2019/dep+rel"]
BASELINE = LOOP_ROWS[0]
REFERENCE = gpu_results.REFERENCE  # torch.nn.Transformer at the baseline's size, compiled, in the same call
GPU_BEGIN, GPU_END = "<!-- GPU_STUDY_BEGIN: written by benchmarks/gpu_run.py table -->", "<!-- GPU_STUDY_END -->"
CPU_BEGIN, CPU_END = "<!-- CPU_RUNS_BEGIN: written by benchmarks/gpu_run.py table -->", "<!-- CPU_RUNS_END -->"
# docs/results.md's sections: (device kind, converged budget) -> its markers
SECTIONS = {("gpu", False): (GPU_BEGIN, GPU_END), ("cpu", False): (CPU_BEGIN, CPU_END),
            ("gpu", True): ("<!-- GPU_CONVERGED_BEGIN: written by benchmarks/gpu_run.py table -->",
                            "<!-- GPU_CONVERGED_END -->"),
            ("cpu", True): ("<!-- CPU_CONVERGED_BEGIN: written by benchmarks/gpu_run.py table -->",
                            "<!-- CPU_CONVERGED_END -->")}


# What the run imports beyond the standard library: its first step (``preflight``) imports all of
# it in seconds.  The GPU image lacks CARRIED; ``carry`` (here, before the GPU call) writes them as
# wheels into --wheels, which travels with the checkout, and the run puts them on its path.
# tests/bench/test_gpu_run.py dry-runs the run where only the image's packages import.
NEEDS = ("torch", "numpy", "pyarrow", "sentencepiece", "sacrebleu", "yaml", "sacremoses", "models",
         "platform.data.dataset", "platform.training.loop", "platform.inference", "benchmarks.study",
         "benchmarks.speed.models")
CARRIED = ("sacremoses",)  # pure Python; what it imports (click, joblib, regex, tqdm) is on the image
WHEELS = ROOT / ".gpu" / "wheels"
TEST = ROOT / ".gpu" / "tanaka" / "test"  # the Tanaka test pair's prefix, as ``carry`` writes it


def carry(wheels: Path, tanaka: Path, data: Path, test: Path) -> list[Path]:
    """Here: what the GPU call carries, so that ``all`` and ``study`` run there with their defaults.
    Each of ``CARRIED`` from this environment as a wheel in ``wheels`` (its installed files and
    metadata, zipped; pure Python imports straight from the zip), the checkout's commit, the
    Tanaka test pair at the ``test`` prefix, and the prepared dataset at ``data`` (made here with
    ``platform.prepare`` where it is not).  Returns the paths the call must carry."""
    import importlib.metadata
    import shutil
    import zipfile

    pairs = [tanaka / f"test.{lang}.conllu.gz" for lang in ("ja", "en")]
    if not all(path.is_file() for path in pairs):
        raise SystemExit(f"gpu_run carry: no Tanaka test pair in {tanaka} (test.ja.conllu.gz, test.en.conllu.gz): "
                         f"give --tanaka DIR")
    wheels.mkdir(parents=True, exist_ok=True)
    # the results file's commit, read there (no git in the GPU machine's copy); "-dirty" where the
    # checkout that travels has changes no commit holds
    commit = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], cwd=ROOT, capture_output=True,
                            text=True)
    if commit.returncode == 0:
        (ROOT / ".gpu").mkdir(exist_ok=True)
        (ROOT / ".gpu" / "commit").write_text(commit.stdout.strip() + "\n")
    for name in CARRIED:
        distribution = importlib.metadata.distribution(name)
        path = wheels / f"{distribution.metadata['Name'].replace('-', '_')}-{distribution.version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for file in distribution.files or []:
                located = Path(file.locate())
                if "__pycache__" not in file.parts and ".." not in file.parts and located.is_file():
                    archive.write(located, str(file))
    test.parent.mkdir(parents=True, exist_ok=True)
    for path in pairs:
        shutil.copyfile(path, test.parent / f"{test.name}{path.name[len('test'):]}")
    if not (data / "meta.json").is_file():
        splits = [flag for split in ("train", "dev", "test") for flag in (f"--{split}", str(tanaka / split))]
        prepared = subprocess.run([sys.executable, "-m", "platform.prepare", *splits, "--src", "ja", "--tgt", "en",
                                   "--out", str(data)], cwd=ROOT, capture_output=True, text=True)
        if prepared.returncode:
            last = (prepared.stderr.strip().splitlines() or [f"exit {prepared.returncode}"])[-1]
            raise SystemExit(f"gpu_run carry: preparing {data} failed: {last}")
    gpu = ROOT / ".gpu"  # the commit's file is in it too: carried whole
    paths = (wheels, test.parent, data)
    return list(dict.fromkeys(gpu if path.resolve().is_relative_to(gpu) else path for path in paths))


def use_carried(wheels: Path) -> None:
    """The carried wheels on the path of this process and of every one it starts."""
    found = [str(path) for path in sorted(Path(wheels).glob("*.whl"))]
    sys.path[:0] = found
    os.environ["PYTHONPATH"] = os.pathsep.join(found + [p for p in [os.environ.get("PYTHONPATH")] if p])


def preflight(args) -> None:
    """The run's first step, in seconds: every module it needs, its data and its device; what is
    missing stops it with one line, before any of the lent minutes go to training."""
    import importlib

    use_carried(args.wheels)
    for module in NEEDS:
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - not only ImportError: a version's missing name, a shared library
            carried = " (carried: run `python -m benchmarks.gpu_run carry` first)" if module in CARRIED else ""
            raise SystemExit(f"gpu_run: cannot run here: {module} does not import: "
                             f"{type(error).__name__}: {error}{carried}") from None
    if not (Path(args.data) / "meta.json").is_file():
        raise SystemExit(f"gpu_run: cannot run here: no prepared dataset at {args.data} (no meta.json)")
    test = Path(getattr(args, "test", ""))
    if args.command in ("all", "study") and not list(test.parent.glob(test.name + ".*")):
        raise SystemExit(f"gpu_run: cannot run here: no test files {test}.*")
    import torch

    if DEVICE == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_run: cannot run here: torch sees no CUDA device (GPU_RUN_DEVICE=cpu dry-runs it)")
    log(f"preflight: {len(NEEDS)} modules, the data and the {DEVICE} device are there")


def log(message: str) -> None:
    print(f"[gpu_run {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ------------------------------------------------------------------------------ loop: MFU of the real loop


def parse_setting(label: str) -> tuple[str, dict]:
    """A loop run's setting ``MODE[+deterministic][@TOKENS][#N]``: the compile mode, and the
    config it changes (``TrainConfig.deterministic``; ``TOKENS`` target positions an update
    instead of ``--max-tokens``); ``#N`` marks the Nth run of the same setting (a rerun whose
    losses must repeat where the setting is deterministic)."""
    label = label.split("#")[0]
    label, _, tokens = label.partition("@")
    mode, *flags = label.split("+")
    unknown = set(flags) - {"deterministic"}
    if mode not in ("off", "default", "reduce-overhead") or unknown or (tokens and not tokens.isdigit()):
        raise SystemExit(f"gpu_run: bad loop setting {label!r}: MODE[+deterministic][@TOKENS][#N]")
    changes = {"deterministic": True} if flags else {}
    return mode, {**changes, **({"batching.max_tokens": int(tokens)} if tokens else {})}


def loop_config(row: str, setting: str, args):
    """The row's recipe at the paper size with a GPU's batch (``--max-tokens`` per update, no
    sentence cap, ``--bucket``), in ``setting`` (``parse_setting``); a progress call after every
    update, the one validation at the end."""
    from platform.training.config import resolve_config
    from platform.training.recipes import get_recipe

    mode, changes = parse_setting(setting)
    total = args.warmup + args.updates + args.profile
    settings = {"batching.max_sentences": None, "batching.max_tokens": args.max_tokens,
                "batching.pack_width": args.pack_width, "batching.bucket": args.bucket, "batching.fixed_shape": True,
                "compile": mode,
                "validate_every": total, "average_last": 0, "eval.max_sentences": 16, "log_every": 1, **changes}
    return resolve_config(get_recipe(row).model, "paper", recipe=row, max_updates=total,
                          overrides=[f"{key}={json.dumps(value)}" for key, value in settings.items()])


def flops_per_token(args) -> float:
    """The baseline's training FLOPs per target token (EOS included) over the training split:
    every sentence's own matmuls and attention squares, as ``transformer_train_flops`` counts."""
    import numpy as np

    from benchmarks.speed.models import transformer_train_flops
    from platform.data.dataset import PreparedDataset

    dataset = PreparedDataset.open(args.data)
    config = loop_config("deguchi2019/baseline", "off", args).model
    src = dataset.train.src_lengths.astype(np.float64)
    tgt = dataset.train.tgt_lengths.astype(np.float64) + 1
    flops = transformer_train_flops(config, 1, src, tgt, dataset.meta["vocab_size"]["tgt"])
    return float(np.sum(flops) / np.sum(tgt))


def peak_flops() -> float:
    import torch

    if DEVICE != "cuda":
        return 1e12  # a dry run: any number
    name = torch.cuda.get_device_name()
    return next((peak for key, peak in PEAK_BF16.items() if key in name), 989e12)


def loop_one(args) -> dict:
    """One (row, mode) through ``fit``: the updates after ``--warmup`` timed from the loop's own
    per-update progress calls (each after its update's one wait for the device), then
    ``--profile`` updates under torch.profiler; the row ``reference`` is ``reference_one``."""
    if args.row == REFERENCE:
        return reference_one(args)
    import torch
    from torch.profiler import ProfilerActivity, profile

    from platform.data.dataset import PreparedDataset
    from platform.training.context import Context, chosen_precision
    from platform.training.hooks import Hooks
    from platform.training.loop import fit
    from platform.training.step import compile_count

    stamps: list[tuple[int, float, float, float]] = []  # (update, time, tokens, data wait share)
    losses: list[tuple[float, float]] = []  # every update's (loss, gradient norm): a rerun's must repeat
    profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) if args.profile else None
    timed_end = args.warmup + args.updates
    compiles: dict[str, int] = {}

    class Timing(Hooks):
        def progress(self, metrics, step) -> None:
            stamps.append((step, time.perf_counter(), metrics["tokens_per_update"], metrics["data_wait_share"]))
            losses.append((metrics["train_loss"], metrics["grad_norm"]))
            if step == args.warmup:
                compiles["after_warmup"] = compile_count()
            if step == timed_end:
                compiles["after_timed"] = compile_count()
                if profiler:
                    torch.cuda.synchronize() if DEVICE == "cuda" else None
                    profiler.start()
            if profiler and step == timed_end + args.profile:
                torch.cuda.synchronize() if DEVICE == "cuda" else None
                profiler.stop()

    config = loop_config(args.row, args.mode, args)
    began = time.perf_counter()
    fit(config, PreparedDataset.open(args.data), Context(device=torch.device(DEVICE)), Timing(), log=lambda m: None)
    timed = [s for s in stamps if args.warmup < s[0] <= timed_end]
    seconds = timed[-1][1] - stamps[args.warmup - 1][1]
    tokens = sum(s[2] for s in timed)
    result = {"row": args.row, "model": config.model.name, "compile": args.mode, "tokens_per_s": tokens / seconds,
              "ms_per_update": seconds / len(timed) * 1e3, "tokens_per_update": tokens / len(timed),
              "data_wait_share": statistics.fmean(s[3] for s in timed), "warmup_s": stamps[args.warmup - 1][1] - began,
              "compiles_after_warmup": compiles.get("after_warmup", 0), "compiles": compiles.get("after_timed", 0),
              "precision": chosen_precision(config.precision, torch.device(DEVICE)),
              "deterministic": config.deterministic,
              "losses_digest": hashlib.sha256(repr(losses).encode()).hexdigest()[:12],
              "wall_s": time.perf_counter() - began,
              "peak_memory_gib": torch.cuda.max_memory_allocated() / 2 ** 30 if DEVICE == "cuda" else 0.0}
    if profiler:
        result["profile"] = profile_summary(profiler, args.profile, profiled_stamps(stamps, timed_end, args.profile))
    return result


def reference_one(args) -> dict:
    """The same call's reference: ``torch.nn.Transformer`` (``benchmarks.speed.models``'s
    ``ReferenceTransformer``: the baseline's dimensions, embeddings, tied output and dropout) at the
    baseline's paper size, on a batch of the loop's size (``--max-tokens`` positions in rows of
    ``--pack-width``, no padding), label-smoothed cross-entropy in bf16 autocast on CUDA, AdamW
    (fused on CUDA), compiled as ``--mode``; timed as the loop is, so a ratio to it holds whatever
    the GPU's day."""
    import torch
    import torch.nn.functional as F

    from benchmarks.speed.models import ReferenceTransformer, random_batch
    from platform.data.dataset import PreparedDataset
    from platform.training.loss import forward, teacher_forcing
    from platform.training.step import compile_count

    config = loop_config(BASELINE, args.mode, args)
    mode = parse_setting(args.mode)[0]
    vocab = PreparedDataset.open(args.data).meta["vocab_size"]
    vocab = min(vocab.values()) if isinstance(vocab, dict) else int(vocab)
    batch = random_batch(config.batching.max_tokens // args.pack_width, args.pack_width, vocab, DEVICE)
    model = ReferenceTransformer(config.model, vocab, vocab).to(DEVICE).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=DEVICE == "cuda")
    trained = model if mode == "off" else torch.compile(model, mode=None if mode == "default" else mode)
    tgt_in, tgt_out = teacher_forcing(batch)
    smoothing = config.optim.label_smoothing

    def update() -> None:
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=DEVICE == "cuda"):
            logits = forward(trained, batch, tgt_in).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=0,
                               label_smoothing=smoothing)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def synchronize() -> None:
        if DEVICE == "cuda":
            torch.cuda.synchronize()

    began = time.perf_counter()
    for _ in range(args.warmup):
        update()
    synchronize()
    compiles, warmed = compile_count(), time.perf_counter()
    for _ in range(args.updates):
        update()
    synchronize()
    seconds = time.perf_counter() - warmed
    tokens = int((tgt_out != 0).sum())
    return {"row": REFERENCE, "model": "torch.nn.Transformer", "compile": args.mode,
            "tokens_per_s": tokens * args.updates / seconds, "ms_per_update": seconds / args.updates * 1e3,
            "tokens_per_update": tokens, "data_wait_share": 0.0, "warmup_s": warmed - began,
            "compiles_after_warmup": compiles, "compiles": compile_count(), "precision": "bf16" if DEVICE == "cuda"
            else "fp32", "wall_s": time.perf_counter() - began,
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2 ** 30 if DEVICE == "cuda" else 0.0}


def profiled_stamps(stamps: list, timed_end: int, updates: int) -> list:
    """The progress stamps that bound the profiled updates: ``stamps[i]`` is update i + 1's end,
    and the profiler runs from update ``timed_end``'s end to update ``timed_end + updates``'s, so
    ``updates + 1`` stamps, ``updates`` intervals."""
    return stamps[timed_end - 1:timed_end + updates]


def profile_summary(profiler, updates: int, stamps) -> dict:
    """Kernels per update, their GPU time against the profiled updates' wall time (``stamps``:
    ``profiled_stamps``; the profiler's own work slows a launch-bound eager update, so the loop
    table sets the kernel time against the timed updates instead), the costliest kernels, and
    the host's time per update in each phase of ``train_step`` (``step.PHASE``; the rest of the
    wall is the loop's own: the next batch, the reports): where the host is busy while the GPU
    waits, against the wait phase, where the host waits for the GPU.  The ranges a
    ``record_function`` also marks on the GPU's timeline (PyTorch's ``Optimizer.step``, these
    phases) span kernels counted already: left out of the kernel time, as PyTorch's own
    profiler table leaves them out."""
    from platform.training.step import PHASE, PHASES

    averages = profiler.key_averages()
    events = [e for e in averages if e.device_type.name == "CUDA" and not e.is_user_annotation]
    kernel_ms = sum(e.self_device_time_total for e in events) / updates / 1e3
    wall_ms = (stamps[-1][1] - stamps[0][1]) / updates * 1e3
    top = sorted(events, key=lambda e: -e.self_device_time_total)[:12]
    spent = {e.key.removeprefix(PHASE): e.cpu_time_total / updates / 1e3 for e in averages
             if e.device_type.name == "CPU" and e.key.startswith(PHASE)}
    host = {phase: spent.get(phase, 0.0) for phase in PHASES}
    return {"kernels_per_update": sum(e.count for e in events) / updates, "kernel_ms_per_update": kernel_ms,
            "wall_ms_per_update": wall_ms, "gpu_busy": kernel_ms / wall_ms if wall_ms else 0.0,
            "host_ms_per_update": {**host, "the loop's own": max(wall_ms - sum(host.values()), 0.0)},
            "top": [{"name": e.key[:90], "ms_per_update": e.self_device_time_total / updates / 1e3,
                     "calls_per_update": e.count / updates} for e in top]}


BATCHES = (32768, 65536)  # target positions an update tried beside --max-tokens, for the GPU batch


def loop_plan(results: list[dict]):
    """The next (row, setting) to run after ``results``, or None, the decisive measurements first
    (a call's loop gets minutes for about 7 runs): the baseline eager and with CUDA graphs, the
    plain compiled baseline next if the graphs failed, the reference (the ratio needs the same
    call); the syntax rows in the baseline's best compiled mode (their share of its speed), the
    baseline there at the larger batches (``BATCHES``: the GPU batch); then ``dep+rel`` eager and
    deterministic twice (its cost, and whether its losses repeat) and deterministic compiled, the
    other syntax rows eager and the plain compiled baseline."""
    done = {(r["row"], r["compile"]) for r in results}
    ok = {(r["row"], r["compile"]): r["mfu"] for r in results if "mfu" in r}
    compiled = {mode: mfu for (row, mode), mfu in ok.items()
                if row == BASELINE and mode in ("default", "reduce-overhead")}
    best = max(compiled, key=compiled.get) if compiled else None
    deprel = "omote2019/dep+rel"
    plan = [(BASELINE, "off"), (BASELINE, "reduce-overhead"), (REFERENCE, "default")]
    plan += [(BASELINE, "default")] if (BASELINE, "reduce-overhead") not in ok else []
    plan += [(row, best) for row in LOOP_ROWS[1:] if best]
    plan += [(BASELINE, f"{best}@{tokens}") for tokens in BATCHES if best]
    plan += [(deprel, "off"), (deprel, "off+deterministic"), (deprel, "off+deterministic#2")]
    plan += [(deprel, f"{best}+deterministic")] if best else []  # its cost where the rows train compiled
    plan += [(row, "off") for row in LOOP_ROWS[1:]] + [(BASELINE, "default")]
    return next((step for step in plan if step not in done), None)


def loop(args) -> dict:
    """``loop_plan`` run by run in fresh processes until ``args.deadline`` (a time.time())."""
    per_token, peak = flops_per_token(args), peak_flops()
    results: dict = {"flops_per_token": per_token, "peak_flops": peak, "max_tokens": args.max_tokens,
                     "pack_width": args.pack_width, "bucket": args.bucket, "warmup": args.warmup,
                     "updates": args.updates, "runs": []}
    plan = [tuple(step.rsplit(":", 1)) for step in args.plan.split(",")] if args.plan else None
    while (step := (plan.pop(0) if plan else None) if plan is not None else loop_plan(results["runs"])) is not None:
        row, mode = step
        left = args.deadline - time.time()
        if left < args.min_run_s:
            log(f"loop: {left:.0f} s left, stopping before {row} {mode}")
            break
        entry = {"row": row, "compile": mode, **worker(["loop-one", "--row", row, "--mode", mode, *loop_flags(args)],
                                                       left, args)}
        if "tokens_per_s" in entry:
            entry["tflops"] = entry["tokens_per_s"] * per_token / 1e12
            entry["mfu"] = entry["tokens_per_s"] * per_token / peak
            busy = entry.get("profile", {})
            log(f"loop {row:<22} {mode:<16} {entry['tokens_per_s']:>10,.0f} tok/s  {entry['ms_per_update']:.1f} ms  "
                f"{entry['tflops']:6.1f} TFLOP/s  MFU {entry['mfu']:.1%}  compiles {entry['compiles_after_warmup']}"
                f"→{entry['compiles']}  data wait {entry['data_wait_share']:.0%}  warm-up {entry['warmup_s']:.0f} s  "
                f"{entry['peak_memory_gib']:.1f} GiB  kernels {busy.get('kernels_per_update', 0):.0f}/update, "
                f"GPU busy {busy.get('gpu_busy', 0):.0%}  host ms/update: "
                + ", ".join(f"{phase} {ms:.1f}" for phase, ms in busy.get("host_ms_per_update", {}).items()))
        results["runs"].append(entry)
        write_json(args.out_dir / "loop.json", results)
    return results


def loop_flags(args) -> list[str]:
    return ["--data", args.data, "--warmup", str(args.warmup), "--updates", str(args.updates),
            "--profile", str(args.profile), "--max-tokens", str(args.max_tokens), "--pack-width", str(args.pack_width),
            "--bucket", str(args.bucket)]


def worker(command: list[str], timeout: float, args) -> dict:
    """This script's ``command`` in a process of its own: its JSON result, or why it has none."""
    started = time.time()
    try:
        done = subprocess.run([*THIS, *command], capture_output=True, text=True, timeout=timeout,
                              cwd=ROOT)
    except subprocess.TimeoutExpired:
        log(f"{' '.join(command[:5])} timed out after {timeout:.0f} s")
        return {"command": command, "failed": f"timed out after {timeout:.0f} s"}
    result = None if done.returncode else last_json(done.stdout)
    if result is None:
        why = f"exit {done.returncode}" if done.returncode else "no JSON result on its last line"
        log(f"{' '.join(command[:5])} failed ({why}) after {time.time() - started:.0f} s:\n{done.stderr[-3000:]}")
        return {"command": command, "failed": f"{why}: {done.stderr[-3000:]}"}
    return result


def run_result(work: str | Path, row: str, seed: int) -> Path:
    """Where a study run (``study-one``) writes its result: beside its outputs in ``--work``."""
    return Path(work) / f"{study.slug(row)}-s{seed}.json"


def read_result(path: Path) -> dict | None:
    """A study run's result file (``run_result``), or None where it is missing or not whole."""
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return result if isinstance(result, dict) else None


def last_json(stdout: str) -> dict | None:
    """A worker's result: the JSON object on its output's last line (None where there is none: a
    stray line from a library after it must fail that run only, not the call's results file)."""
    lines = stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    return result if isinstance(result, dict) else None


def write_json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1))


# ------------------------------------------------------------------------------ study: rows x seeds at once


def study_args(args) -> SimpleNamespace:
    """What ``benchmarks/study.py``'s config functions read: its size and budget."""
    return SimpleNamespace(size="cpu", max_updates=args.max_updates, epoch_updates=args.epoch_updates,
                           patience=getattr(args, "patience", None))


def study_one(args) -> dict:
    """Train one (row, seed) with the study's config (float32), then score it on test in every
    way the CPU study scores that row (``study.test_kinds``)."""
    import dataclasses

    import torch

    from platform.data.dataset import PreparedDataset
    from platform.inference import Trained, write_outputs
    from platform.training.config import TrainConfig
    from platform.training.context import Context
    from platform.training.hooks import LocalHooks
    from platform.training.loop import fit
    from platform.training.recipes import get_recipe

    budget = study_args(args)
    config: TrainConfig = dataclasses.replace(study.row_config(args.row, args.seed, budget), precision="fp32")
    directory = Path(args.work) / f"{study.slug(args.row)}-s{args.seed}"
    directory.mkdir(parents=True, exist_ok=True)
    hooks = LocalHooks(directory, config)
    began = time.perf_counter()
    fit(config, PreparedDataset.open(args.data), Context(device=torch.device(DEVICE)), hooks, log=lambda m: None)
    trained_s = time.perf_counter() - began
    validations = sum("dev_bleu" in report for report in hooks.reported)  # fewer where it stopped early
    tests = {}
    for kind, decoded_as in study.test_kinds(args.row, validations, study.decoded_as(budget)).items():
        average = int(kind[len("test_avg"):]) if kind.startswith("test_avg") else None
        trained = Trained.load(checkpoint=directory / "best.pt", device=DEVICE, average_last=average)
        decode = get_recipe(decoded_as).training if decoded_as else {}
        result, references = trained.score(args.test, beam=decode.get("decode.beam"), alpha=decode.get("decode.alpha"),
                                           device=DEVICE, metric_prefix=kind)
        write_outputs(directory / kind, result.hypotheses, references, trained.tgt_lang)
        tests[kind] = {"metrics": result.metrics, "signature": result.signature,
                       **{side: (directory / f"{kind}.{side}").read_text(encoding="utf-8").splitlines()
                          for side in ("hyp", "ref")}}
    num_parameters = sum(p.numel() for p in trained.model.parameters())
    return {"row": args.row, "seed": args.seed, "history": hooks.reported, "train_s": trained_s,
            "wall_s": time.perf_counter() - began, "num_parameters": num_parameters, "tests": tests,
            "precision": config.precision}


# seeds each row gets over all GPU runs: 5 for each paper's headline comparison (Deguchi's DBSA
# against its Transformer; Omote's dep+rel against abs and against rel), 3 for the other rows
HEADLINE_ROWS = ("deguchi2019/baseline", "deguchi2019/enc+dec", "omote2019/rel", "omote2019/dep+rel")
SEEDS, HEADLINE_SEEDS = 3, 5


def seed_targets(rows: list[str], seeds: int, headline_seeds: int) -> dict[str, int]:
    return {row: headline_seeds if row in HEADLINE_ROWS else seeds for row in rows}


def baseline_of(row: str, shared: dict[str, str]) -> str:
    """The row whose runs are ``row``'s table's baseline (Omote's: Deguchi's runs, where shared)."""
    baseline = next(base for base, (_, rows) in study.TABLES.items() if row in rows)
    return shared.get(baseline, baseline)


def study_plan(targets: dict[str, int], trained: dict[str, int], first_seed: int, max_runs: int,
               shared: dict[str, str], paired: bool = True,
               fits: Callable[[list[tuple[str, int]]], bool] | None = None,
               seeds: dict[str, set[int]] | None = None) -> list[tuple[str, int]]:
    """The (row, seed) pairs one GPU call trains: the runs each row lacks of its target (``trained``:
    what the results files hold), in rounds of one new seed number each, headline rows first,
    every run with its table's baseline at the same seed (the paired tests pair a seed's runs; not
    where ``paired`` is false: the baseline's runs of other calls then stand for it in
    the seed-level test, and in the paired tests at the seeds they share), until ``max_runs``, leaving out a run
    that would not let the plan ``fit`` the call (``call_fits``); seeds start at ``first_seed``,
    after every seed a results file has. Unpaired, a row first takes the seeds its baseline has
    and it lacks (``seeds``: each row's seeds in the results files), so the paired tests still
    find the baseline's run of its seed."""
    rows = sorted(targets, key=lambda row: (row not in HEADLINE_ROWS, list(targets).index(row)))
    counts = {row: trained.get(row, 0) for row in rows}
    seeds = seeds or {}
    earlier = sorted(set().union(*seeds.values())) if seeds and not paired else []
    plan: list[tuple[str, int]] = []
    for seed in [*earlier, *range(first_seed, first_seed + max(targets.values(), default=0))]:
        for row in rows:
            if counts[row] >= targets[row] or (row, seed) in plan or seed in seeds.get(row, ()):
                continue
            if seed < first_seed and seed not in seeds.get(baseline_of(row, shared), ()):
                continue  # an earlier seed only where the baseline's run of it stands for the pair
            partner = [(baseline_of(row, shared), seed)] if paired else []
            wanted = [run for run in dict.fromkeys([*partner, (row, seed)]) if run not in plan]
            if len(plan) + len(wanted) > max_runs:
                return plan
            if fits is not None and not fits(plan + wanted):  # too slow now: the rows after it may fit
                continue
            plan.extend(wanted)
            for run_row, _ in wanted:
                counts[run_row] = counts.get(run_row, 0) + 1
    return plan


# a row without a run on the device yet is planned at the slowest measured row's rate, this many
# times over (a guess, until its first run measures it); a call's runs end this long before its deadline
UNMEASURED_FACTOR = 2.0
MARGIN_S = 60.0


def run_rates(results_dir: Path, kind: str = HERE) -> dict[str, tuple[float, int]]:
    """Each row's pace on ``kind``'s device from every earlier call: its runs' mean wall seconds
    per update (training, validations and test decoding) and the fewest runs at once it was
    measured among (a plan of more is slowed in proportion from there: the cautious reading)."""
    paces: dict[str, list[float]] = {}
    together: dict[str, int] = {}
    for result in gpu_results.read_all([results_dir]) if results_dir.exists() else []:
        runs = (result.get("study") or {}).get("runs", [])
        if gpu_results.device_kind(result) != kind:
            continue
        for run in runs:
            if "failed" not in run and run.get("history"):
                paces.setdefault(run["row"], []).append(run["wall_s"] / run["history"][-1]["step"])
                together[run["row"]] = min(together.get(run["row"], len(runs)), len(runs))
    return {row: (statistics.fmean(values), together[row]) for row, values in paces.items()}


def call_fits(rates: dict[str, tuple[float, int]], updates: int, seconds: float):
    """Whether a plan's runs, all at once, end within ``seconds`` at the measured ``rates``: each
    run takes its row's seconds per update times ``updates`` (the cap: a run may stop earlier),
    slowed in proportion where more runs share the device than its rate was measured among; a row
    never measured is taken at the slowest measured row's rate × ``UNMEASURED_FACTOR``; nothing
    measured on the device yet: every plan fits (``--max-runs`` alone bounds the first call)."""
    if not rates:
        return lambda plan: True
    slowest = max(pace for pace, _ in rates.values()) * UNMEASURED_FACTOR
    crowd = min(k for _, k in rates.values())

    def fits(plan: list[tuple[str, int]]) -> bool:
        for row, _ in plan:
            pace, measured_among = rates.get(row, (slowest, crowd))
            if pace * updates * max(1.0, len(plan) / measured_among) > seconds:
                return False
        return True

    return fits


def trained_so_far(results_dir: Path, args, kind: str = HERE) -> tuple[dict[str, int], int, dict[str, set[int]]]:
    """The runs each row has in the results files of ``kind``'s device at this budget (a seed
    trained twice once, as the tables pool it), the first seed they have not used, and each
    row's seeds."""
    budget = gpu_results.budget_of(vars(study_args(args)))
    studies = [result for result in (gpu_results.read_all([results_dir]) if results_dir.exists() else [])
               if result.get("study") and gpu_results.device_kind(result) == kind
               and gpu_results.budget_of(result["study"]) == budget]
    seeds = [0, *(run["seed"] for result in studies for run in result["study"]["runs"])]
    by_row: dict[str, set[int]] = {}
    for result in gpu_results.latest_runs(studies):  # one run of each (row, seed)
        for run in result["study"]["runs"]:
            if "failed" not in run:
                by_row.setdefault(run["row"], set()).add(run["seed"])
    return {row: len(seeds) for row, seeds in by_row.items()}, max(seeds) + 1, by_row


def study_run(args) -> dict:
    """The runs ``study_plan`` picks, at once, each in its own process on the one GPU, until the deadline."""
    shared = study.decoded_as(study_args(args))
    rows = [row for row in args.rows if row not in shared]
    trained, first_seed, seeds = trained_so_far(args.results_dir, args)
    # on a GPU, as many runs as the call's minutes hold at the paces earlier calls measured (a run
    # the deadline cuts short is lost); on the CPU each run has a core of its own: --max-runs
    seconds = args.deadline - time.time() - MARGIN_S
    fits = call_fits(run_rates(args.results_dir), args.max_updates, seconds) if HERE == "gpu" else None
    runs = study_plan(seed_targets(rows, args.seeds, args.headline_seeds), trained, first_seed, args.max_runs, shared,
                      paired=not args.unpaired, fits=fits, seeds=seeds)
    log(f"study: {len(runs)} runs this call ({', '.join(f'{row} s{seed}' for row, seed in runs)}); "
        f"before it, at this budget: {trained or 'none'}")
    work = Path(args.work)
    began = time.time()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    processes = {}
    for row, seed in runs:
        command = [*THIS, "study-one", "--row", row, "--seed", str(seed), "--data", args.data,
                   "--test", args.test, "--work", str(work), "--max-updates", str(args.max_updates),
                   "--epoch-updates", str(args.epoch_updates),
                   *(["--patience", str(args.patience)] if args.patience else [])]
        log_file = open(work / f"{study.slug(row)}-s{seed}.log", "w")
        run_result(work, row, seed).unlink(missing_ok=True)  # an earlier call's, in a reused --work
        processes[(row, seed)] = (subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_file,
                                                   stderr=subprocess.STDOUT), log_file)
    results: dict = {"rows": sorted({row for row, _ in runs}), "seeds": sorted({seed for _, seed in runs}),
                     "max_updates": args.max_updates, "epoch_updates": args.epoch_updates,
                     "patience": args.patience, "runs": []}
    for (row, seed), (process, log_file) in processes.items():
        try:
            process.wait(timeout=max(1.0, args.deadline - time.time()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log_file.close()
        written = run_result(work, row, seed)
        entry = None if process.returncode else read_result(written)
        if entry is None:
            why = ("past the deadline" if process.returncode == -9 else f"exit {process.returncode}"
                   if process.returncode else f"no JSON result in {written}")
            tail = Path(log_file.name).read_text()[-3000:]
            log(f"study {row} seed {seed} failed ({why}):\n{tail}")
            results["runs"].append({"row": row, "seed": seed, "failed": f"{why}: {tail}"})
            continue
        results["runs"].append(entry)
        bleu = {kind: round(test["metrics"][f"{kind}_bleu"], 2) for kind, test in entry["tests"].items()}
        log(f"study {row:<22} seed {seed}: {bleu}  trained in {entry['train_s']:.0f} s, "
            f"{entry['wall_s']:.0f} s with test decoding")
    results["wall_s"] = time.time() - began
    write_json(args.out_dir / "study.json", results)
    return results


# ------------------------------------------------------------------------------ table: here, from the JSON


def scored_runs(studies: list[dict], shared: dict[str, str]) -> dict:
    """``{row: {run: study.Scored}}`` of the pooled GPU studies, as ``study.scored_rows`` reads
    MLflow runs: each run's own row, and the ``shared`` rows from their source rows' runs.  A run
    is ``I:SEED``, the I-th results file's seed (the paired tests pair a seed's runs, whichever file
    holds each: ``study.paired_cells``)."""
    rows: dict[str, dict[str, study.Scored]] = {}
    for index, result in enumerate(studies, 1):
        for run in result["study"]["runs"]:
            if "failed" in run:
                continue
            metrics = {key: value for test in run["tests"].values() for key, value in test["metrics"].items()}
            metrics.update(num_parameters=run["num_parameters"], tokens_per_s=run["history"][-1]["tokens_per_s"],
                           study_wall_s=run["wall_s"], **study.convergence(
                               {report["step"]: report["dev_bleu"] for report in run["history"]
                                if "dev_bleu" in report}, result["study"].get("patience")))
            kinds = {"test": run["row"], **{f"test_as_{study.slug(row)}": row for row, source in shared.items()
                                            if source == run["row"]}}
            tests = run["tests"]
            for kind, row in kinds.items():
                rows.setdefault(row, {})[f"{index}:{run['seed']}"] = study.Scored(
                    metrics, lambda kind, tests=tests: {"hyp": tests[kind]["hyp"], "ref": tests[kind]["ref"]}, kind)
    return rows


def table(args) -> int:
    """The docs from every results file (``gpu_results``): the pooled GPU studies' tables
    (``study.paper_tables``), a block per budget, between the GPU markers of ``--out`` (its
    converged budgets between their own), the CPU's (``GPU_RUN_DEVICE=cpu``) between its CPU
    markers with the two devices' difference at each budget both ran, and every loop measurement
    between the loop markers of ``--performance``."""
    results = gpu_results.read_all(args.results)
    if not results:
        raise SystemExit(f"no results file in {', '.join(map(str, args.results))}")
    sorts = {converged: {kind: gpu_results.pooled_budgets(results, kind, converged) for kind in ("gpu", "cpu")}
             for converged in (False, True)}
    any_study = any(budgets for pooled in sorts.values() for budgets in pooled.values())
    seen = study.training_targets(args.tanaka) if any_study else frozenset()
    if any_study and not seen:
        log(f"no training split at {args.tanaka}: the tables lose the 'test BLEU, unseen' column (--tanaka DIR)")
    for converged, pooled in sorts.items():
        gpu = {gpu_results.budget_key(studies[-1]["study"]): studies for studies in pooled["gpu"]}
        for kind, budgets in pooled.items():
            blocks = []
            for studies in budgets:
                scored = scored_runs(studies, shared_of(studies))
                text = study_section(studies, scored, kind, seen)
                same = gpu.get(gpu_results.budget_key(studies[-1]["study"]))  # a GPU's runs at this budget
                if kind == "cpu" and same:
                    text += "\n" + device_difference({"cpu": scored, "gpu": scored_runs(same, shared_of(same))})
                blocks.append(text)
            if blocks:
                study.write_section(Path(args.out), "\n".join(blocks), *SECTIONS[kind, converged])
    if any(result.get("loop") for result in results):
        study.write_section(Path(args.performance), gpu_results.loop_table(results), gpu_results.LOOP_BEGIN,
                            gpu_results.LOOP_END)
        study.write_section(Path(args.cluster), gpu_results.afternoon(results), gpu_results.AFTERNOON_BEGIN,
                            gpu_results.AFTERNOON_END)
    return 0


def shared_of(studies: list[dict]) -> dict[str, str]:
    """The rows whose runs are another row's (``study.decoded_as``) at the pooled studies' budget."""
    return study.decoded_as(study_args(SimpleNamespace(**gpu_results.budget_of(studies[-1]["study"]))))


def study_section(studies: list[dict], scored: dict, kind: str, seen: frozenset[str]) -> str:
    """One device's pooled studies as the paper tables, with what was pooled and each row's runs."""
    from platform.tracking.significance import signature_tokenizer

    first = next(run for result in studies for run in result["study"]["runs"] if "failed" not in run)
    sections = study.paper_tables(scored, shared_of(studies), signature_tokenizer(first["tests"]["test"]["signature"]),
                                  "####", seen)
    runs = "; ".join(gpu_results.setting(result, f"{len(result['study']['runs'])} runs at once, "
                                                 f"{result['study']['wall_s'] / 60:.1f} min") for result in studies)
    words = gpu_results.budget_words(studies[-1]["study"])
    pooled = (f"### {words[0].upper()}{words[1:]}\n\n"
              f"{len(studies)} {kind.upper()} results file(s) pooled, a call each: {runs}. Each paired test pairs "
              f"runs of the same call.\n\n")
    stopped = (" (a run stopped early counts up to its last validation)"
               if gpu_results.early_stopping(studies[-1]["study"]) else "")
    curves = (f"#### Dev BLEU by update (mean over runs)\n\n{study.curves_table(pooled_curves(studies))}\n\n"
              "Each row's dev BLEU at each validation (the whole dev set, decoded greedily), the mean over its runs "
              f"in the tables above{stopped}: how fast each model learns within the budget.\n")
    return pooled + "\n".join(sections) + "\n" + curves + "\n" + seeds_line(studies, shared_of(studies), kind)


def pooled_curves(studies: list[dict]) -> dict[str, dict[int, float]]:
    """``{row: {update: dev BLEU}}``: each trained row's validations, the mean over its runs."""
    points: dict[str, dict[int, list[float]]] = {}
    for result in studies:
        for run in result["study"]["runs"]:
            for report in [] if "failed" in run else run["history"]:
                if "dev_bleu" in report:
                    points.setdefault(run["row"], {}).setdefault(report["step"], []).append(report["dev_bleu"])
    return {row: study.mean_curve(points[row]) for row in study.ROWS if row in points}


def device_difference(scored: dict[str, dict]) -> str:
    """Each row that ran on both devices at one budget (``scored``: each device's runs at it): its
    test BLEU on each, GPU minus CPU over seeds (Welch's 95% interval and p), and the difference
    seed by seed where both ran a seed."""
    from platform.tracking.significance import seed_columns

    lines = ["| row | CPU runs | CPU test BLEU | GPU runs | GPU test BLEU | Δ GPU − CPU (95% CI) | p (Welch) "
             "| the same seed, GPU − CPU |", "|---|---|---|---|---|---|---|---|"]
    for row in [row for _, rows in study.TABLES.values() for row in rows]:
        runs = [scored[kind].get(row, {}) for kind in ("cpu", "gpu")]
        if not all(runs):
            continue
        bleu = [{run: entry.metric("test_bleu") for run, entry in device.items()} for device in runs]
        cpu, gpu = seed_columns([list(device.values()) for device in bleu])
        by_seed = [{} for _ in bleu]
        for device, seeds in zip(bleu, by_seed):
            for run, value in device.items():
                seeds.setdefault(int(run.split(":")[1]), value)  # a run I:SEED; the first run of each seed number
        same = ", ".join(f"s{seed} {by_seed[1][seed] - by_seed[0][seed]:+.2f}"
                         for seed in sorted(set(by_seed[0]) & set(by_seed[1])))
        lines.append(f"| {row} | {len(runs[0])} | {cpu['BLEU']} | {len(runs[1])} | {gpu['BLEU']} | "
                     f"{gpu['Δ BLEU (95% CI)']} | {gpu['p (seeds)']} | {same or '–'} |")
    return ("#### The two devices, row by row\n\n" + "\n".join(lines) + "\n\nThe same rows, configs, seeds and budget "
            "trained on each device (float32 on both): test BLEU mean ± std over each device's runs; Δ: the GPU's mean "
            "minus the CPU's, with Welch's 95% CI and p; then seed by seed, where both devices ran a seed number.\n")


def seeds_line(studies: list[dict], shared: dict[str, str], kind: str = "gpu") -> str:
    """How many runs each row has against its target, and their seed numbers (``gpu_run study``
    trains what is missing): a GPU's line names every row of the papers' tables, a CPU's the
    headline rows and any other row it ran."""
    seeds: dict[str, list[int]] = {}
    for result in studies:
        for run in result["study"]["runs"]:
            if "failed" not in run:
                seeds.setdefault(run["row"], []).append(run["seed"])
    rows = [row for row in study.ROWS if row not in shared and (kind == "gpu" or row in seeds or row in HEADLINE_ROWS)]
    targets = seed_targets(rows, SEEDS, HEADLINE_SEEDS)
    command = "`gpu_run study`" if kind == "gpu" else "`GPU_RUN_DEVICE=cpu gpu_run study`"

    def runs(row: str) -> str:
        numbers = seeds.get(row, [])
        return f"{row} {len(numbers)}/{targets[row]}" + (f" (seeds {', '.join(map(str, numbers))})" if numbers else "")

    return (f"Runs so far of each row, against its target over {kind.upper()} runs (5 for the headline rows, 3 for "
            f"the others; {command} trains what is missing): " + ", ".join(map(runs, rows)) + ".\n")


def results_file(args, loop_result: dict | None, study_result: dict | None) -> Path:
    """This run's results file (``gpu_results``) in ``--out-dir``: what goes into the repository."""
    meta = {**machine(), "commit": args.commit, "command": " ".join(["python -m benchmarks.gpu_run", *sys.argv[1:]]),
            "date": time.strftime("%Y%m%d-%H%M", time.gmtime())}
    return gpu_results.write(args.out_dir, meta, loop_result, study_result)


# ------------------------------------------------------------------------------ the command line


def relative(path: Path) -> str:
    """``path`` from the checkout's root where it is inside it (what the GPU call carries)."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def checkout_commit() -> str:
    """The commit ``carry`` read here (the GPU machine's copy of the checkout has no git)."""
    path = ROOT / ".gpu" / "commit"
    return path.read_text().strip() if path.exists() else "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data", default=str(ROOT / "data" / "tanaka-ja-en"), help="the prepared Tanaka dataset")
    common.add_argument("--out-dir", type=Path, default=Path(os.environ.get("OUT", "gpu-run")))
    common.add_argument("--wheels", type=Path, default=WHEELS, help="the carried wheels (written by `carry`)")
    common.add_argument("--commit", default=checkout_commit(),
                        help="the checkout's commit, for the results file (default: what `carry` read)")
    loop_options = argparse.ArgumentParser(add_help=False)
    loop_options.add_argument("--warmup", type=int, default=45,
                              help="updates before the timed ones (compiling and recording; past the first "
                                   "epoch's end, whose last batch fixed_shape pads)")
    loop_options.add_argument("--updates", type=int, default=60, help="timed updates")
    loop_options.add_argument("--profile", type=int, default=3, help="updates under torch.profiler after them")
    loop_options.add_argument("--max-tokens", type=int, default=16384, help="positions per update (packed)")
    loop_options.add_argument("--pack-width", type=int, default=48,
                              help="packed row width (48 on Tanaka: one shape, the epochs' last batches padded "
                                   "up to it by batching.fixed_shape)")
    loop_options.add_argument("--bucket", type=int, default=8)
    loop_options.add_argument("--plan", help="ROW:MODE,... to run in this order (default: loop_plan's)")
    study_options = argparse.ArgumentParser(add_help=False)
    study_options.add_argument("--test", default=str(TEST), help="the Tanaka test CoNLL-U pair prefix (written by "
                               "`carry`)")
    study_options.add_argument("--work", default="/tmp/gpu-study")
    study_options.add_argument("--max-updates", type=int, default=study.MAX_UPDATES)
    study_options.add_argument("--epoch-updates", type=int, default=study.EPOCH_UPDATES)
    study_options.add_argument("--patience", type=int, default=None,
                               help="stop a run after this many validations without a better dev BLEU (a "
                                    "converged budget with --max-updates as its cap; default: none)")
    study_options.add_argument("--rows", nargs="*", default=study.ROWS, help="default: every row of the papers' tables")
    study_options.add_argument("--seeds", type=int, default=SEEDS, help="runs a row gets over all GPU runs")
    study_options.add_argument("--headline-seeds", type=int, default=HEADLINE_SEEDS,
                               help="runs each headline row gets over all GPU runs (HEADLINE_ROWS)")
    study_options.add_argument("--max-runs", type=int, default=16,
                               help="runs this call trains at once (one process each; 16 cores)")
    study_options.add_argument("--unpaired", action="store_true",
                               help="train the rows without their baseline's run of each seed (where its "
                                    "runs of earlier calls suffice: the seed-level test pools them); a row "
                                    "takes the baseline's seeds it lacks first, so the paired tests pair them")
    study_options.add_argument("--results-dir", type=Path, default=gpu_results.RESULTS,
                               help="the results files whose runs count: the call trains what they lack")
    a = sub.add_parser("all", parents=[common, loop_options, study_options])
    a.add_argument("--minutes", type=float, default=9.0, help="the whole run's budget")
    a.add_argument("--loop-minutes", type=float, default=4.0, help="of which the loop's")
    a.add_argument("--min-run-s", type=float, default=25.0)
    lp = sub.add_parser("loop", parents=[common, loop_options])
    lp.add_argument("--minutes", type=float, default=5.0)
    lp.add_argument("--min-run-s", type=float, default=25.0)
    one = sub.add_parser("loop-one", parents=[common, loop_options])
    one.add_argument("--row", required=True)
    one.add_argument("--mode", required=True)
    sp = sub.add_parser("study", parents=[common, study_options])
    sp.add_argument("--minutes", type=float, default=9.0)
    so = sub.add_parser("study-one", parents=[common, study_options])
    so.add_argument("--row", required=True)
    so.add_argument("--seed", type=int, required=True)
    cp = sub.add_parser("carry", parents=[common], help="here, before the GPU call: the packages the GPU image "
                        "lacks as wheels, the Tanaka test pair and the prepared dataset")
    cp.add_argument("--test", type=Path, default=TEST, help="where the Tanaka test pair goes (the study's --test)")
    cp.add_argument("--tanaka", type=Path, default=study.TANAKA, help="the tanaka-enja directory to carry from")
    rp = sub.add_parser("record", help="an earlier run's outputs (meta.json, loop.json, study.json) as a results file")
    rp.add_argument("--from", dest="source", type=Path, required=True)
    rp.add_argument("--commit", required=True)
    rp.add_argument("--command", dest="ran", required=True, help="the command that ran")
    rp.add_argument("--date", required=True, help="YYYYMMDD-HHMM, UTC")
    rp.add_argument("--to", type=Path, default=gpu_results.RESULTS)
    tp = sub.add_parser("table", help="docs/results.md and docs/performance.md from every results file")
    tp.add_argument("--results", type=Path, nargs="+", default=[gpu_results.RESULTS],
                    help="results files, or folders of them (default: benchmarks/gpu_results)")
    tp.add_argument("--out", default=str(ROOT / "docs" / "results.md"))
    tp.add_argument("--performance", default=str(ROOT / "docs" / "performance.md"))
    tp.add_argument("--cluster", default=str(ROOT / "docs" / "cluster.md"), help="where 'What an afternoon buys' goes")
    tp.add_argument("--tanaka", type=Path, default=study.TANAKA,
                    help="the tanaka-enja directory: its training targets mark the test pairs seen in training")
    args = parser.parse_args()
    if getattr(args, "warmup", 1) < 1:
        parser.error("--warmup must be at least 1 (the timed updates start after a measured one)")
    if args.command == "table":
        return table(args)
    if args.command == "carry":
        carried = carry(args.wheels, args.tanaka, Path(args.data), args.test)
        print("carry these to the GPU machine: " + " ".join(relative(path) for path in carried))
        return 0
    if args.command == "record":
        print(gpu_results.record(args.source, args.commit, args.ran, args.date, args.to))
        return 0
    if args.command == "loop-one":
        print(json.dumps(loop_one(args)))
        return 0
    if args.command == "study-one":  # a file, not the pipe: ~100 KB of hypotheses, kept if the caller dies
        write_json(run_result(args.work, args.row, args.seed), study_one(args))
        return 0
    preflight(args)
    started = STARTED
    args.out_dir.mkdir(parents=True, exist_ok=True)
    Path(args.work if hasattr(args, "work") else args.out_dir).mkdir(parents=True, exist_ok=True)
    write_json(args.out_dir / "meta.json", machine())
    end = started + args.minutes * 60
    loop_result = study_result = None
    try:
        if args.command in ("all", "loop"):
            args.deadline = min(end, started + (args.loop_minutes if args.command == "all" else args.minutes) * 60)
            loop_result = loop(args)
        if args.command in ("all", "study"):
            args.deadline = end
            study_result = study_run(args)
    finally:  # what was measured reaches the results file, whatever failed after it
        log(f"done in {time.time() - started:.0f} s; the results file: {results_file(args, loop_result, study_result)}")
    return 0


def machine() -> dict:
    import torch

    device = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"
    return {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
            "cpus": os.cpu_count()}


if __name__ == "__main__":
    sys.exit(main())
