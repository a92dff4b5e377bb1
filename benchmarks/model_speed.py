"""Forward+backward throughput of the models, side by side in one run (torch + models/ only).

    python benchmarks/model_speed.py                      # CPU, small size
    python benchmarks/model_speed.py --device cuda --bf16 --size paper --batch 128
    python benchmarks/model_speed.py --models transformer seq2seq tree2seq hier_tree_gru gumbel_tree

Prints the parameter count of every model at the chosen size and at paper size, and the
training throughput (source + target tokens per second, fwd + bwd + optimizer step) on random
data with dependency depths/heads.  Ratios within one run are meaningful; absolute numbers on a
shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere without installing

from models import MODELS, build_model, default_config  # noqa: E402
from models.inputs import Source  # noqa: E402
from tree_speed import random_trees  # noqa: E402  (benchmarks/ is on sys.path as the script's dir)

SIZES = {
    "tiny": dict(num_encoder_layers=2, num_decoder_layers=2, d_model=64, num_heads=4, d_ff=256),
    "small": dict(num_encoder_layers=3, num_decoder_layers=3, d_model=256, num_heads=4, d_ff=1024),
    "paper": dict(num_encoder_layers=6, num_decoder_layers=6, d_model=512, num_heads=8, d_ff=2048),
}
TRANSFORMERS = ["transformer", "transformer_rel", "dbsa", "deprel"]
RNN_SIZES = {  # comparable sizes for the recurrent/tree models (--models seq2seq ...)
    "tiny": dict(d_embed=64, d_hidden=32),
    "small": dict(d_embed=256, d_hidden=128),
    "paper": dict(d_embed=512, d_hidden=256),
}


def random_batch(batch: int, length: int, vocab: int, device: str) -> tuple[Source, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, vocab, (batch, length), generator=generator)
    depth = torch.randint(0, 6, (batch, length), generator=generator)
    src = Source(ids=ids.to(device), lengths=torch.full((batch,), length).to(device), depth=depth.to(device),
                 tree_parent=random_trees([length] * batch).to(device))
    tgt = torch.randint(4, vocab, (batch, length + 1), generator=generator).to(device)
    return src, tgt


def sized_config(name: str, size_name: str):
    if MODELS[name].config_class.__name__ == "RNNConfig":
        return default_config(name, **RNN_SIZES[size_name])
    size = SIZES[size_name]
    layers = {"p_enc": size["num_encoder_layers"] // 2 + 1, "p_dec": size["num_decoder_layers"] // 2 + 1}
    return default_config(name, **size, **(layers if name == "dbsa" else {}))


def measure(name: str, args) -> tuple[int, float]:
    torch.manual_seed(0)
    model = build_model(sized_config(name, args.size), args.vocab, args.vocab).to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    src, tgt = random_batch(args.batch, args.length, args.vocab, args.device)
    tokens = args.batch * (2 * args.length + 1)

    def train_step():
        with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=args.bf16):
            out = model(src, tgt[:, :-1])
            loss = F.cross_entropy(out.logits.float().transpose(1, 2), tgt[:, 1:])
            for logprobs in (out.enc_parse_logprobs, out.dec_parse_logprobs):
                if logprobs is not None:  # supervise towards the previous token: any valid target
                    loss = loss + logprobs.diagonal(dim1=1, dim2=2).float().clamp(min=-30).neg().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        train_step()
    _sync(args.device)
    start = time.perf_counter()
    for _ in range(args.steps):
        train_step()
    _sync(args.device)
    elapsed = time.perf_counter() - start
    return sum(p.numel() for p in model.parameters()), tokens * args.steps / elapsed


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--models", nargs="+", default=TRANSFORMERS, choices=list(MODELS))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=30, help="source length; target is length + 1")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (GPU)")
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    print(f"device {args.device}, size {args.size} {SIZES[args.size]}, batch {args.batch}×{args.length}, "
          f"bf16 {args.bf16}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"{'model':<16}{'params (this size)':>20}{'params (paper size)':>22}{'tokens/s':>12}{'vs transformer':>16}")
    baseline = None
    for name in args.models:
        paper = sum(p.numel() for p in build_model(sized_config(name, "paper"), args.vocab, args.vocab).parameters())
        params, speed = measure(name, args)
        baseline = baseline or speed
        print(f"{name:<16}{params:>20,}{paper:>22,}{speed:>12,.0f}{speed / baseline:>15.2f}x")


if __name__ == "__main__":
    main()
