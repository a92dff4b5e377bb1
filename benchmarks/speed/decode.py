"""``decode``: beam search with the key/value cache against recomputing the decoder's prefix."""

from __future__ import annotations

import statistics
from typing import Any

import torch
from torch import Tensor, nn

from benchmarks.speed.common import Settings, _fmt, interleaved_seconds, median_ratio
from benchmarks.speed.models import model_config, random_source
from models import build_model
from models.inputs import Source
from models.search import beam_search
from platform.training.config import EvalConfig

# ------------------------------------------------------------------------------ decode


class FullRecompute:
    """The decoding interface of ``models.search`` without the key/value cache: each step runs
    the decoder over the whole prefix (the encoder still runs once per sentence).  The state is
    the prefix [B, t], which ``beam_search`` reorders like any other state tensor."""

    def __init__(self, model: nn.Module):
        self.model = model

    def encode(self, src: Source):
        return self.model.encode(src)

    def start_state(self, encoded) -> Tensor:
        return torch.zeros(encoded.memory.shape[0], 0, dtype=torch.long, device=encoded.memory.device)  # [B, 0]

    def step(self, encoded, prefix: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
        prefix = torch.cat([prefix, tokens[:, None]], dim=1)  # [B, t]
        hidden, _ = self.model._decode(prefix, encoded, caches=None, offset=0)  # [B, t, D], no cache
        return torch.log_softmax(self.model.generator(hidden[:, -1]).float(), dim=-1), prefix


DECODE_OPTIONS = dict(alpha=EvalConfig().alpha, max_len_a=EvalConfig().max_len_a, max_len_b=EvalConfig().max_len_b)


def bench_decode(settings: Settings) -> dict[str, Any]:
    """Sentences/s of beam search with the cache against full recomputation (same hypotheses)."""
    generator = torch.Generator().manual_seed(1)
    src = random_source(settings.decode_sentences, settings.decode_length, settings.vocab, generator)
    src = src.to(settings.device)
    results = {}
    for name in ("transformer", "dbsa"):
        torch.manual_seed(0)
        model = build_model(model_config(name, settings.size), settings.vocab, settings.vocab)
        model = model.to(settings.device).eval()

        def search(decoder):
            with torch.autocast(settings.device.split(":")[0], dtype=torch.bfloat16, enabled=settings.bf16):
                return beam_search(decoder, src, beam=settings.beam, **DECODE_OPTIONS)

        same = [[h.tokens for h in hyps] for hyps in search(model)] == [[h.tokens for h in hyps]
                                                                        for hyps in search(FullRecompute(model))]
        contenders = {"incremental": lambda model=model: search(model),
                      "full": lambda model=model: search(FullRecompute(model))}
        seconds = interleaved_seconds(contenders, calls=1, rounds=settings.rounds, warmup=0, device=settings.device)
        results[name] = {
            "incremental_sentences_per_s": settings.decode_sentences / statistics.median(seconds["incremental"]),
            "full_recompute_sentences_per_s": settings.decode_sentences / statistics.median(seconds["full"]),
            "speedup": median_ratio(seconds["full"], seconds["incremental"]), "same_hypotheses": same}
    return {"beam": settings.beam, "sentences": settings.decode_sentences, "source_length": settings.decode_length,
            "max_output_length": int(settings.decode_length * DECODE_OPTIONS["max_len_a"]
                                     + DECODE_OPTIONS["max_len_b"]),
            **results}


def print_decode(result: dict[str, Any]) -> None:
    print(f"\nbeam-{result['beam']} decoding of {result['sentences']} sentences of {result['source_length']} subwords "
          f"(up to {result['max_output_length']} output tokens)")
    print(f"{'model':<14}{'cached sent/s':>15}{'full sent/s':>13}{'speed-up':>10}{'same output':>13}")
    for name in ("transformer", "dbsa"):
        entry = result[name]
        print(f"{name:<14}{entry['incremental_sentences_per_s']:>15.2f}{entry['full_recompute_sentences_per_s']:>13.2f}"
              f"{entry['speedup']:>9.2f}x{_fmt(entry['same_hypotheses']):>13}")
