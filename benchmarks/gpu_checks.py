"""GPU checks of the platform's own training step and decoding (docs/performance.md, "GPU").

    python -m benchmarks.gpu_checks precision --data data/demo --updates 300 --out precision.json
    python -m benchmarks.gpu_checks decode --checkpoints ckpt --test data/demo/conllu/test --src sov --tgt svo
    python -m benchmarks.gpu_checks step --out step.json          # paper-size step: profile and variants
    python -m benchmarks.gpu_checks pack --data data/demo --k 1,2,4,8 --seconds 40

``precision`` trains every model ``--updates`` updates in fp32 and again in bf16 autocast from
the same seed on the same batches (the platform's ``train_step``, sweep-size models) and reports
how far the bf16 loss curve is from the fp32 one; it saves each fp32 model as a checkpoint.
``decode`` runs ``python -m platform.evaluate`` on every checkpoint on the CPU and on CUDA and
counts the hypotheses that differ.  ``step`` profiles one paper-size training step of the
baseline and times variants of it.  ``pack`` runs k training processes of sweep size on one GPU
at once and reports their aggregate target tokens/s.  Needs torch with CUDA, not Ray or MLflow.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from models import MODELS
from platform.data.batching import ShardedBatches
from platform.data.dataset import PreparedDataset
from platform.training.checkpoint import checkpoint_state, save_checkpoint
from platform.training.config import resolve_config
from platform.training.context import Context
from platform.training.loop import new_progress
from platform.training.step import build_training, train_step

ROOT = Path(__file__).resolve().parents[1]
THIS = [sys.executable, "-m", "benchmarks.gpu_checks"]  # this benchmark again, in a process of its own



DEVICE = os.environ.get("GPU_CHECKS_DEVICE", "cuda")  # cpu: a quick dry run of the script itself


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def updates_of(sampler: ShardedBatches, count: int):
    """``count`` updates in the platform's order, epoch after epoch."""
    done, epoch = 0, 0
    while True:
        sampler.set_epoch(epoch)
        for batches in sampler.updates():
            if done == count:
                return
            yield batches
            done += 1
        epoch += 1


def train(model_name: str, dataset: PreparedDataset, updates: int, bf16: bool, size: str = "sweep",
          overrides: tuple[str, ...] = ()):
    config = resolve_config(model_name, size, overrides=list(overrides))
    ctx = Context(device=torch.device(DEVICE), precision="bf16" if bf16 else "fp32")
    vocab = dataset.meta["vocab_size"]
    model, optimizer, scheduler = build_training(config, vocab["src"], vocab["tgt"], ctx)
    sampler = ShardedBatches(dataset.train, config.batching)
    losses, tokens = [], 0
    sync()
    began = time.perf_counter()
    for batches in updates_of(sampler, updates):
        result = train_step(model, optimizer, scheduler, batches, config, ctx)
        losses.append(result.loss)
        tokens += result.num_tokens
    sync()
    seconds = time.perf_counter() - began
    return config, model, optimizer, scheduler, sampler, losses, tokens / seconds


def window_means(values: list[float], width: int) -> list[float]:
    return [statistics.fmean(values[i:i + width]) for i in range(0, len(values) - width + 1, width)]


def precision(args) -> dict:
    dataset = PreparedDataset.open(args.data)
    out_dir = Path(args.checkpoints)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in args.models.split(","):
        config, model, opt, sched, sampler, fp32, fp32_rate = train(name, dataset, args.updates, bf16=False)
        progress = {**new_progress(), "epoch": 1, "step": args.updates}
        save_checkpoint(checkpoint_state(model, opt, sched, sampler, config, progress, dataset.subword_bytes,
                                         dataset.meta), out_dir / f"{name}.pt")
        *_, bf16, bf16_rate = train(name, dataset, args.updates, bf16=True)
        width = max(1, min(25, args.updates // 4))
        a, b = window_means(fp32, width), window_means(bf16, width)
        gaps = [abs(x - y) / x for x, y in zip(a, b)]
        results[name] = {"fp32_first": fp32[0], "bf16_first": bf16[0], "fp32_last25": a[-1], "bf16_last25": b[-1],
                         "max_window_gap": max(gaps), "last_window_gap": gaps[-1], "fp32_tokens_per_s": fp32_rate,
                         "bf16_tokens_per_s": bf16_rate, "fp32_curve": a, "bf16_curve": b}
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1))
        print(f"{name:<16} loss fp32 {fp32[0]:.3f}→{a[-1]:.3f}  bf16 {bf16[0]:.3f}→{b[-1]:.3f}  "
              f"gap max {max(gaps):.2%} last {gaps[-1]:.2%}  tok/s fp32 {fp32_rate:,.0f} bf16 {bf16_rate:,.0f}",
              flush=True)
    return results


def decode(args) -> dict:
    """``platform.evaluate`` on CPU and CUDA for every checkpoint; the CPU runs in parallel."""
    out = Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(p.stem for p in Path(args.checkpoints).glob("*.pt"))

    def command(name: str, label: str) -> list[str]:
        device = "cpu" if label == "cpu" else DEVICE
        return [sys.executable, "-m", "platform.evaluate", "--checkpoint", str(Path(args.checkpoints) / f"{name}.pt"),
                "--test", args.test, "--src", args.src, "--tgt", args.tgt, "--device", device,
                "--out", str(out / f"{name}.{label}")]

    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    cpu = {name: subprocess.Popen(command(name, "cpu"), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for name in names}
    cuda = {name: subprocess.run(command(name, "cuda"), cwd=ROOT, capture_output=True, text=True) for name in names}
    results = {}
    for name, process in cpu.items():
        stdout, stderr = process.communicate()
        finished = {"cpu": subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr),
                    "cuda": cuda[name]}
        failed = {d: run.stderr[-600:] for d, run in finished.items() if run.returncode}
        if failed:  # platform.evaluate prints its scores as JSON on stdout, the rest on stderr
            results[name] = {"failed": failed}
            print(f"{name}: failed\n{failed}", flush=True)
            continue
        scores = {d: json.loads(run.stdout) for d, run in finished.items()}
        hyp = {d: (out / f"{name}.{d}.hyp").read_text().splitlines() for d in ("cpu", "cuda")}
        differ = [i for i, (x, y) in enumerate(zip(hyp["cpu"], hyp["cuda"])) if x != y]
        results[name] = dict(sentences=len(hyp["cpu"]), differ=len(differ), examples=[
            {"cpu": hyp["cpu"][i], "cuda": hyp["cuda"][i]} for i in differ[:3]], scores=scores)
        print(f"{name:<16} {len(differ)} of {len(hyp['cpu'])} hypotheses differ; "
              f"BLEU cpu {scores['cpu'].get('test_bleu')} cuda {scores['cuda'].get('test_bleu')}", flush=True)
    return results


# ------------------------------------------------------------------------------ step: profile and variants


def step(args) -> dict:
    from benchmarks.speed.models import model_config, random_batch
    from models import build_model
    from platform.training.config import OptimConfig, TrainConfig

    torch.manual_seed(0)
    config = model_config("transformer", "paper")
    batch = random_batch(args.tokens // args.length, args.length, 8000, "cuda")
    results = {}

    def make(fused: bool, compiled: bool):
        torch.manual_seed(0)
        model = build_model(config, 8000, 8000).cuda().train()
        train_config = TrainConfig(model=config, optim=OptimConfig())
        from platform.training.step import build_optimizer
        optimizer, scheduler = build_optimizer(model, train_config.optim)
        if fused:
            optimizer = torch.optim.Adam(model.parameters(), lr=train_config.optim.lr, betas=train_config.optim.betas,
                                         eps=train_config.optim.eps, fused=True)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
        runner = torch.compile(model) if compiled else model
        ctx = Context(device=torch.device(DEVICE), precision="bf16")
        return lambda: train_step(runner, optimizer, scheduler, batch, train_config, ctx)

    def timed(fn, steps: int = 20, warmup: int = 5) -> float:
        for _ in range(warmup):
            fn()
        sync()
        began = time.perf_counter()
        for _ in range(steps):
            fn()
        sync()
        return (time.perf_counter() - began) / steps

    from benchmarks.speed.models import transformer_train_flops
    flops = transformer_train_flops(config, batch.tgt_ids.shape[0], args.length, args.length, 8000)
    for label, fused, compiled in (("default", False, False), ("fused_adam", True, False),
                                   ("default_again", False, False), ("compiled", False, True)):
        if compiled and args.no_compile:
            continue
        began = time.perf_counter()
        fn = make(fused, compiled)
        seconds = timed(fn)
        results[label] = {"step_ms": seconds * 1e3, "tflops": flops / seconds / 1e12,
                          "setup_s": time.perf_counter() - began - seconds * 20}
        print(f"{label:<14} {seconds * 1e3:8.2f} ms/step  {flops / seconds / 1e12:6.1f} TFLOP/s", flush=True)

    fn = make(False, False)
    for _ in range(3):
        fn()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
        sync()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
    print(table, flush=True)
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    results["profile"] = {"kernels_per_step": sum(e.count for e in events) / 3,
                          "kernel_ms_per_step": sum(e.self_device_time_total for e in events) / 3 / 1e3,
                          "table": table}
    results["attention"] = attention_variants(batch.tgt_ids.shape[0], args.length, config.num_heads,
                                              config.d_model // config.num_heads)
    return results


def attention_variants(batch: int, length: int, heads: int, head_dim: int) -> dict:
    """Forward + backward of SDPA at the step's shape: a materialised mask against is_causal / none."""
    import torch.nn.functional as F

    q, k, v = (torch.randn(batch, heads, length, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    causal = torch.ones(length, length, dtype=torch.bool, device="cuda").tril()
    full_mask = causal.expand(batch, 1, length, length).contiguous()
    variants = {"bool_mask_causal": dict(attn_mask=full_mask), "is_causal": dict(is_causal=True),
                "padding_mask": dict(attn_mask=torch.ones(batch, 1, length, length, dtype=torch.bool, device="cuda")),
                "no_mask": {}}
    out = {}
    for name, kwargs in variants.items():
        def run(kwargs=kwargs):
            F.scaled_dot_product_attention(q, k, v, **kwargs).sum().backward()
        for _ in range(5):
            run()
        sync()
        began = time.perf_counter()
        for _ in range(50):
            run()
        sync()
        out[name] = (time.perf_counter() - began) / 50 * 1e3
        print(f"attention {name:<18} {out[name]:.3f} ms fwd+bwd", flush=True)
    return out


# ------------------------------------------------------------------------------ pack: k trials on one GPU


def one(args) -> dict:
    """One training process of the pack: steady tokens/s after a warm-up."""
    dataset = PreparedDataset.open(args.data)
    config = resolve_config(args.model, args.size)
    ctx = Context(device=torch.device(DEVICE), precision="bf16")
    vocab = dataset.meta["vocab_size"]
    model, optimizer, scheduler = build_training(config, vocab["src"], vocab["tgt"], ctx)
    sampler = ShardedBatches(dataset.train, config.batching)
    began, tokens, counted = time.perf_counter(), 0, None
    for index, batches in enumerate(updates_of(sampler, 10 ** 9)):
        result = train_step(model, optimizer, scheduler, batches, config, ctx)
        if index == 20:
            counted, tokens = time.perf_counter(), 0
        elif counted is not None:
            tokens += result.num_tokens
        if time.perf_counter() - began > args.seconds:
            break
    return {"tokens_per_s": tokens / (time.perf_counter() - counted), "updates": index + 1}


def pack(args) -> dict:
    results = {}
    for model in args.models.split(","):
        for k in (int(x) for x in args.k.split(",")):
            command = [*THIS, "one", "--data", args.data, "--model", model, "--size", args.size,
                       "--seconds", str(args.seconds)]
            processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
                         for _ in range(k)]
            rates = []
            for process in processes:
                stdout, stderr = process.communicate()
                if process.returncode:
                    raise RuntimeError(stderr[-2000:])
                rates.append(json.loads(stdout.strip().splitlines()[-1])["tokens_per_s"])
            results[f"{model}_k{k}"] = {"aggregate": sum(rates), "each": rates}
            print(f"{model:<14} k={k}: aggregate {sum(rates):,.0f} tokens/s "
                  f"(each {min(rates):,.0f}–{max(rates):,.0f})", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("precision")
    p.add_argument("--data", required=True)
    p.add_argument("--updates", type=int, default=300)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--checkpoints", default="gpu-checkpoints")
    d = sub.add_parser("decode")
    d.add_argument("--checkpoints", default="gpu-checkpoints")
    d.add_argument("--test", required=True)
    d.add_argument("--src", required=True)
    d.add_argument("--tgt", required=True)
    d.add_argument("--work", default="gpu-decode")
    s = sub.add_parser("step")
    s.add_argument("--tokens", type=int, default=16384)
    s.add_argument("--length", type=int, default=64)
    s.add_argument("--no-compile", action="store_true")
    k = sub.add_parser("pack")
    k.add_argument("--data", required=True)
    k.add_argument("--models", default="transformer")
    k.add_argument("--size", default="sweep")
    k.add_argument("--k", default="1,2,4,8")
    k.add_argument("--seconds", type=float, default=40)
    o = sub.add_parser("one")
    o.add_argument("--data", required=True)
    o.add_argument("--model", default="transformer")
    o.add_argument("--size", default="sweep")
    o.add_argument("--seconds", type=float, default=40)
    for sp in (p, d, s, k):
        sp.add_argument("--out", help="write the results as JSON")
    args = parser.parse_args()
    result = {"precision": precision, "decode": decode, "step": step, "pack": pack, "one": one}[args.command](args)
    if args.command == "one":
        print(json.dumps(result))
    elif args.out:
        device = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"
        Path(args.out).write_text(json.dumps({"device": device, "torch": torch.__version__, "results": result},
                                             indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
