"""``python -m platform.bench``: how fast the models and the platform are, side by side in one run.

    python -m platform.bench --device cpu --out bench_cpu.json             # every section
    python -m platform.bench --device cuda --skip-ray --out bench_h100.json  # a GPU box with torch only
    python -m platform.bench --only models,decode --quick                  # a short look

Sections (``--only`` picks some; ``--skip-ray`` drops the two that need Ray):

* ``models``  training throughput (target tokens/s of forward + backward + optimizer step) of every
  model at one size and token batch, and of ``torch.nn.Transformer`` with the same dimensions,
  embeddings, tied output projection, loss and optimizer as the reference; bf16 autocast on
  CUDA, with model FLOP utilisation (MFU);
* ``decode``  beam-4 decoding of ``transformer`` and ``dbsa``: the cached (incremental) decoder of
  ``models.search`` against recomputing the decoder over the whole prefix at every step;
* ``trees``   the batched tree encoders against a per-sentence loop;
* ``ddp``     Ray Train on the demo corpus, the platform's own ``train_step``: 1 against 2 workers;
* ``sweep``   ``python -m platform.tune --smoke``: seconds to the first training step, per trial.

Every contender is timed in interleaved rounds (the order rotates) and summarised by medians of
rates and of per-round ratios, so ratios hold on a noisy, shared machine.  The first three
sections need only torch and ``models/``; Ray, MLflow and Optuna are imported inside the Ray
sections, which record ``{"skipped": "ray not installed"}`` without Ray.  Prints tables and
writes ``--out`` JSON; ``docs/performance.md`` explains the numbers and the targets.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models import MODELS, build_model, default_config
from models.dbsa import IGNORE_INDEX, decoder_parse_targets, encoder_parse_targets
from models.inputs import BOS_ID, EOS_ID, PAD_ID, ModelOutput, Source
from models.layers import Embedding
from models.rnn import RNNConfig
from models.search import beam_search
from models.transformer import TransformerConfig
from models.tree import BinaryTreeLSTMCell, TreeGRUCell, TreeSchedule, bottom_up, bottom_up_per_node

ROOT = Path(__file__).resolve().parents[1]
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
RATIO_TARGETS = {  # name: (model, against, at least) — the targets of the benchmark issue
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
# other at every barrier: beam search measured 1.2 s with one thread and 4.6-23 s with two,
# minutes apart.  One thread keeps ratios stable; --threads N on a machine of your own.
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


# ------------------------------------------------------------------------------ models: data and loss


@dataclass
class TrainingBatch:
    """One fixed batch without padding (a length bucket): B sentences, S = T positions each."""

    src: Source  # ids, lengths, depth [B, S], tree_parent [B, 2S-1]
    tgt_in: Tensor  # [B, T] BOS y1 .. y_{T-1}
    tgt_out: Tensor  # [B, T] y1 .. y_{T-1} EOS
    enc_targets: Tensor  # [B, S] each source token's head (DBSA encoder parse target)
    dec_targets: Tensor  # [B, T] heads over decoder input positions, −100 where unsupervised

    @property
    def num_tokens(self) -> int:
        return self.tgt_out.numel()


def random_trees(lengths: list[int], seed: int = 0) -> Tensor:
    """Random binary trees (random adjacent merges) in the batch layout of ``Source.tree_parent``."""
    rng = random.Random(seed)
    width = max(lengths)
    parents = torch.full((len(lengths), 2 * width - 1), -1)
    for b, n in enumerate(lengths):
        nodes = list(range(n))
        for step in range(n - 1):
            k = rng.randrange(len(nodes) - 1)
            parents[b, nodes[k]] = parents[b, nodes[k + 1]] = width + step
            nodes[k:k + 2] = [width + step]
    return parents


def random_source(num_sentences: int, length: int, vocab: int, generator: torch.Generator) -> Source:
    ids = torch.randint(4, vocab, (num_sentences, length), generator=generator)
    depth = torch.randint(0, 6, (num_sentences, length), generator=generator)
    return Source(ids=ids, lengths=torch.full((num_sentences,), length), depth=depth,
                  tree_parent=random_trees([length] * num_sentences))


def random_batch(num_sentences: int, length: int, vocab: int, device: str, seed: int = 0) -> TrainingBatch:
    """Random ids, depths, trees and dependency heads: every model's inputs and targets."""
    generator = torch.Generator().manual_seed(seed)
    src = random_source(num_sentences, length, vocab, generator)
    words = torch.randint(4, vocab, (num_sentences, length - 1), generator=generator)
    src_heads = torch.randint(0, length, (num_sentences, length), generator=generator)
    tgt_heads = torch.randint(0, length - 1, (num_sentences, length - 1), generator=generator)
    bos, eos = torch.full((num_sentences, 1), BOS_ID), torch.full((num_sentences, 1), EOS_ID)
    return TrainingBatch(src=src.to(device), tgt_in=torch.cat([bos, words], 1).to(device),
                         tgt_out=torch.cat([words, eos], 1).to(device),
                         enc_targets=encoder_parse_targets(src_heads).to(device),
                         dec_targets=decoder_parse_targets(tgt_heads).to(device))


def training_loss(output: ModelOutput, batch: TrainingBatch, label_smoothing: float = 0.1) -> Tensor:
    """The platform's loss (``platform.training``; Deguchi et al. eq. 18 with λ = 1): label-smoothed
    token cross-entropy plus the parse heads' cross-entropy, each a mean over its positions."""
    logits = output.logits.float()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.tgt_out.reshape(-1), ignore_index=PAD_ID,
                           label_smoothing=label_smoothing)
    for logprobs, targets in ((output.enc_parse_logprobs, batch.enc_targets),
                              (output.dec_parse_logprobs, batch.dec_targets)):
        if logprobs is not None:
            flat = logprobs.float().reshape(-1, logprobs.shape[-1])  # [B·S, S]
            loss = loss + F.nll_loss(flat, targets[:, : logprobs.shape[1]].reshape(-1), ignore_index=IGNORE_INDEX)
    return loss


# ------------------------------------------------------------------------------ models: the contenders


def model_config(name: str, size: str):
    """``name``'s preset at one of the benchmark sizes (DBSA's parse heads in the middle layer)."""
    if MODELS[name].config_class is RNNConfig:
        return default_config(name, **RNN_SIZES[size])
    layers = TRANSFORMER_SIZES[size]
    parse = {"p_enc": layers["num_encoder_layers"] // 2 + 1, "p_dec": layers["num_decoder_layers"] // 2 + 1}
    return default_config(name, **layers, **(parse if name == "dbsa" else {}))


class ReferenceTransformer(nn.Module):
    """``torch.nn.Transformer`` dressed as ``models.transformer.Transformer`` (the baseline): the
    same embeddings (×√D + sinusoidal positions + dropout), tied output projection, post-LN,
    dimensions and dropout.  Its attention-weight dropout is set to the config's
    ``attention_dropout`` (0): nn.Transformer would otherwise drop attention weights with
    ``dropout``, work the baseline does not do."""

    def __init__(self, config: TransformerConfig, src_vocab: int, tgt_vocab: int):
        super().__init__()
        d = config.d_model
        self.src_embed = Embedding(src_vocab, d, config.dropout, absolute_positions=True)
        self.tgt_embed = Embedding(tgt_vocab, d, config.dropout, absolute_positions=True)
        self.transformer = nn.Transformer(d_model=d, nhead=config.num_heads, num_encoder_layers=config.num_encoder_layers,
                                          num_decoder_layers=config.num_decoder_layers, dim_feedforward=config.d_ff,
                                          dropout=config.dropout, batch_first=True, norm_first=config.pre_norm)
        for module in self.transformer.modules():
            if isinstance(module, nn.MultiheadAttention):
                module.dropout = config.attention_dropout
        for embedding in (self.src_embed.tokens, self.tgt_embed.tokens):  # the baseline's init: N(0, D^-1/2), PAD 0
            nn.init.normal_(embedding.weight, std=d ** -0.5)
            with torch.no_grad():
                embedding.weight[0].zero_()
        self.generator = nn.Linear(d, tgt_vocab, bias=False)
        self.generator.weight = self.tgt_embed.tokens.weight

    def forward(self, src: Source, tgt_in: Tensor) -> ModelOutput:
        length = tgt_in.shape[1]
        src_padding = ~src.valid  # [B, S] True = padding (nn.Transformer's convention)
        future = torch.ones(length, length, dtype=torch.bool, device=tgt_in.device).triu(1)  # [T, T] True = masked
        hidden = self.transformer(self.src_embed(src.ids), self.tgt_embed(tgt_in), tgt_mask=future,
                                  src_key_padding_mask=src_padding, memory_key_padding_mask=src_padding,
                                  tgt_is_causal=True)  # [B, T, D]
        return ModelOutput(logits=self.generator(hidden))


class TrainingRunner:
    """A model, Adam with the platform's settings and one fixed batch; ``step()`` is one update
    as ``platform.training.train_step`` makes it (autocast forward, fp32 loss, clipping)."""

    def __init__(self, model: nn.Module, batch: TrainingBatch, settings: Settings):
        self.model, self.batch = model.to(settings.device).train(), batch
        self.device_type, self.bf16 = settings.device.split(":")[0], settings.bf16
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        self.last_loss = float("nan")

    def step(self) -> None:
        with torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.bf16):
            output = self.model(self.batch.src, self.batch.tgt_in)
        loss = training_loss(output, self.batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.last_loss = loss.detach()

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def transformer_train_flops(config: TransformerConfig, num_sentences: int, src_len: int, tgt_len: int,
                            vocab: int) -> float:
    """Model FLOPs of one training step (forward + backward = 3 × forward) of the baseline
    architecture: every matmul at 2 FLOPs per multiply-add, attention over the full S×S, T×T
    and T×S squares as executed; embeddings, norms and softmax are not counted, nor the syntax
    terms (relative tables, parse heads) — MFU is measured against the baseline's work."""
    d, f, batch = config.d_model, config.d_ff, num_sentences
    src, tgt = batch * src_len, batch * tgt_len
    encoder_layer = src * (8 * d * d + 4 * d * f) + batch * 4 * src_len * src_len * d  # Q,K,V,O + FFN; QKᵀ and AV
    decoder_layer = (tgt * (8 * d * d + 4 * d * d + 4 * d * f) + src * 4 * d * d  # self Q,K,V,O; cross Q,O; FFN; cross K,V
                     + batch * (4 * tgt_len * tgt_len * d + 4 * tgt_len * src_len * d))
    generator = tgt * 2 * d * vocab
    return 3.0 * (config.num_encoder_layers * encoder_layer + config.num_decoder_layers * decoder_layer + generator)


def build_runners(settings: Settings, batch: TrainingBatch) -> dict[str, TrainingRunner]:
    runners = {}
    for name in settings.models:
        torch.manual_seed(0)
        runners[name] = TrainingRunner(build_model(model_config(name, settings.size), settings.vocab, settings.vocab),
                                       batch, settings)
    torch.manual_seed(0)
    reference = ReferenceTransformer(model_config("transformer", settings.size), settings.vocab, settings.vocab)
    runners[REFERENCE] = TrainingRunner(reference, batch, settings)
    return runners


def bench_models(settings: Settings) -> dict[str, Any]:
    """Training tokens/s of every model and of the reference, with ratios and MFU."""
    batch = random_batch(settings.num_sentences, settings.length, settings.vocab, settings.device)
    runners = build_runners(settings, batch)
    seconds = interleaved_seconds({name: runner.step for name, runner in runners.items()}, calls=settings.steps,
                                  rounds=settings.rounds, warmup=settings.warmup, device=settings.device)
    rates = {name: [batch.num_tokens / s for s in values] for name, values in seconds.items()}
    flops = transformer_train_flops(model_config("transformer", settings.size), settings.num_sentences,
                                    settings.length, settings.length, settings.vocab)
    peak = peak_flops(settings)
    entries = {name: _model_entry(runner, rates, name, flops, peak) for name, runner in runners.items()}
    reference = entries.pop(REFERENCE)
    return {"models": entries,
            "reference": {"torch_nn_transformer_tokens_per_s": reference.pop("tokens_per_s"), **reference},
            "batch": {"sentences": settings.num_sentences, "length": settings.length, "target_tokens": batch.num_tokens}}


def _model_entry(runner: TrainingRunner, rates: dict[str, list[float]], name: str, flops: float,
                 peak: float | None) -> dict[str, Any]:
    mine = rates[name]
    entry: dict[str, Any] = {"tokens_per_s": statistics.median(mine), "tokens_per_s_rounds": mine,
                             "params": runner.num_parameters, "last_loss": float(runner.last_loss)}
    for key, other in (("ratio_vs_transformer", "transformer"), ("ratio_vs_reference", REFERENCE)):
        entry[key] = median_ratio(mine, rates[other]) if other in rates else None
    if name == REFERENCE or isinstance(runner.model.config, TransformerConfig):
        steps_per_s = statistics.median(mine) / runner.batch.num_tokens
        entry["model_flops_per_step"] = flops  # the baseline's FLOPs (see transformer_train_flops)
        entry["achieved_flops_per_s"] = flops * steps_per_s
        entry["mfu"] = flops * steps_per_s / peak if peak else None
    return entry


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


DECODE_OPTIONS = dict(alpha=0.6, max_len_a=1.5, max_len_b=10)  # platform.training.EvalConfig's defaults


def bench_decode(settings: Settings) -> dict[str, Any]:
    """Sentences/s of beam search with the cache against full recomputation (same hypotheses)."""
    generator = torch.Generator().manual_seed(1)
    src = random_source(settings.decode_sentences, settings.decode_length, settings.vocab, generator).to(settings.device)
    results = {}
    for name in ("transformer", "dbsa"):
        torch.manual_seed(0)
        model = build_model(model_config(name, settings.size), settings.vocab, settings.vocab).to(settings.device).eval()

        def search(decoder):
            with torch.autocast(settings.device.split(":")[0], dtype=torch.bfloat16, enabled=settings.bf16):
                return beam_search(decoder, src, beam=settings.beam, **DECODE_OPTIONS)

        same = [[h.tokens for h in hyps] for hyps in search(model)] == [[h.tokens for h in hyps]
                                                                        for hyps in search(FullRecompute(model))]
        seconds = interleaved_seconds({"incremental": lambda: search(model), "full": lambda: search(FullRecompute(model))},
                                      calls=1, rounds=settings.rounds, warmup=0, device=settings.device)
        results[name] = {
            "incremental_sentences_per_s": settings.decode_sentences / statistics.median(seconds["incremental"]),
            "full_recompute_sentences_per_s": settings.decode_sentences / statistics.median(seconds["full"]),
            "speedup": median_ratio(seconds["full"], seconds["incremental"]), "same_hypotheses": same}
    return {"beam": settings.beam, "sentences": settings.decode_sentences, "source_length": settings.decode_length,
            "max_output_length": int(settings.decode_length * DECODE_OPTIONS["max_len_a"] + DECODE_OPTIONS["max_len_b"]),
            **results}


# ------------------------------------------------------------------------------ trees


def tree_contenders(settings: Settings) -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    """(batched, per-sentence) forward + backward of each tree encoder on random trees over
    sentences of 8–24 subwords: the bottom-up height schedule against ``bottom_up_per_node``,
    and the Gumbel tree-LSTM on the whole batch against one sentence at a time."""
    rng = random.Random(0)
    lengths = [rng.randint(8, 24) for _ in range(settings.tree_batch)]
    width, device, dim = max(lengths), settings.device, settings.tree_dim
    parent, length_tensor = random_trees(lengths).to(device), torch.tensor(lengths, device=device)
    torch.manual_seed(0)
    contenders = {}
    for name, cell in (("tree_gru", TreeGRUCell(dim)), ("tree_lstm", BinaryTreeLSTMCell(dim))):
        cell, leaves = cell.to(device), torch.randn(settings.tree_batch, width, dim, device=device, requires_grad=True)
        contenders[name] = (
            lambda cell=cell, leaves=leaves: bottom_up(leaves, TreeSchedule.from_parents(parent, length_tensor), cell,
                                                       width)[0].sum().backward(),
            lambda cell=cell, leaves=leaves: bottom_up_per_node(leaves, parent, length_tensor, cell).sum().backward())
    model = build_model(default_config("gumbel_tree", d_embed=dim, d_hidden=dim // 2, dropout=0.0), 8000, 8000)
    encoder = model.encoder.to(device).train()
    ids = torch.randint(4, 8000, (settings.tree_batch, width), device=device)

    def gumbel_looped():
        for b, n in enumerate(lengths):
            encoder(Source(ids=ids[b:b + 1, :n], lengths=length_tensor[b:b + 1])).states.sum().backward()

    contenders["gumbel_tree_lstm"] = (lambda: encoder(Source(ids=ids, lengths=length_tensor)).states.sum().backward(),
                                      gumbel_looped)
    return contenders


def bench_trees(settings: Settings) -> dict[str, Any]:
    results: dict[str, Any] = {"batch": settings.tree_batch, "dim": settings.tree_dim, "lengths": "8-24"}
    for name, (batched, looped) in tree_contenders(settings).items():
        seconds = interleaved_seconds({"batched": batched, "per_sentence": looped}, calls=1, rounds=settings.rounds,
                                      warmup=1, device=settings.device)
        speedup = median_ratio(seconds["per_sentence"], seconds["batched"])
        results[name] = {"batched_ms": 1e3 * statistics.median(seconds["batched"]),
                         "per_sentence_ms": 1e3 * statistics.median(seconds["per_sentence"]), "speedup": speedup,
                         "target": TREE_SPEEDUP_TARGET, "met": speedup >= TREE_SPEEDUP_TARGET}
    return results


# ------------------------------------------------------------------------------ Ray: DDP


SKIPPED_NO_RAY = {"skipped": "ray not installed"}


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def ddp_worker(loop: dict[str, Any]) -> None:
    """Ray Train worker: the platform's ``train_step`` under DDP on demo batches (each rank its
    share, as ``platform.fit``), ``warmup`` untimed steps, then ``steps`` timed ones."""
    import ray.train
    import ray.train.torch

    from platform import dataset as ds
    from platform.batching import ParquetExamples, ShardedBatches
    from platform.training import Context, build_training, load_train_config, train_step

    torch.set_num_threads(loop["threads"])
    config = load_train_config(loop["config"])
    ctx = Context.from_torch_distributed(ray.train.torch.get_device())
    dataset_dir = Path(loop["dataset_dir"])
    vocab = ds.read_meta(dataset_dir)["vocab_size"]
    model, optimizer, scheduler = build_training(config, vocab["src"], vocab["tgt"], ctx)
    model = ray.train.torch.prepare_model(model, move_to_device=False, parallel_strategy="ddp")
    sampler = ShardedBatches(ParquetExamples(ds.split_path(dataset_dir, "train")), config.batching, rank=ctx.rank,
                             world_size=ctx.world_size)
    batches = _epoch_after_epoch(sampler)
    first_step = time.time()  # everything before this is start-up
    for _ in range(loop["warmup"]):
        train_step(model, optimizer, scheduler, next(batches), config, ctx)
    sentences, tokens, start = torch.zeros(1, dtype=torch.float64), 0, time.perf_counter()
    for _ in range(loop["steps"]):
        batch = next(batches)
        tokens += train_step(model, optimizer, scheduler, batch, config, ctx).num_tokens  # all ranks' tokens
        sentences += batch.src_ids.shape[0]  # this rank's sentences
    elapsed = time.perf_counter() - start
    metrics = {"samples_per_s": float(ctx.all_reduce(sentences)[0]) / elapsed, "tokens_per_s": tokens / elapsed,
               "first_step_unix": first_step}
    if ctx.rank != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as scratch:  # Train V2 keeps only metrics that come with a checkpoint
        Path(scratch, "metrics.json").write_text(json.dumps(metrics))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(scratch))


def _epoch_after_epoch(sampler):
    while True:
        yield from sampler  # one epoch; the sampler moves on to the next


def bench_ddp(settings: Settings) -> dict[str, Any]:
    """1 against 2 Ray Train DDP workers sharing this machine's cores (the platform's default)."""
    if not ray_available():
        return dict(SKIPPED_NO_RAY)
    import ray

    from platform import train
    from platform.bench import ddp_worker as worker  # by reference also when this file runs as __main__

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    dataset_dir = train.resolve_data("demo", quiet=True)
    config = train.resolve_config("transformer", settings.ddp_size, None, [])
    train.start_ray()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ddp-") as storage:
            runs = {f"workers_{w}": _ddp_fit(worker, w, config, dataset_dir, storage, settings) for w in (1, 2)}
    finally:
        ray.shutdown()
    one, two = runs["workers_1"], runs["workers_2"]
    return {**runs, "model": f"transformer ({settings.ddp_size} size)", "data": "demo",
            "max_tokens_per_worker_batch": config.batching.max_tokens,
            "speedup_2_vs_1": two["samples_per_s"] / one["samples_per_s"]}


def _ddp_fit(worker, workers: int, config, dataset_dir: Path, storage: str, settings: Settings) -> dict[str, Any]:
    import ray.train
    from ray.train.torch import TorchTrainer

    from platform import config as config_io

    cpus = settings.ddp_threads
    trainer = TorchTrainer(
        worker,
        train_loop_config={"config": config_io.to_dict(config), "dataset_dir": str(dataset_dir), "threads": cpus,
                           "warmup": settings.ddp_warmup, "steps": settings.ddp_steps},
        scaling_config=ray.train.ScalingConfig(num_workers=workers, use_gpu=False, resources_per_worker={"CPU": cpus}),
        run_config=ray.train.RunConfig(name=f"bench-ddp-{workers}-{uuid.uuid4().hex[:6]}", storage_path=storage,
                                       logging_config=ray.train.LoggingConfig(log_level="ERROR")))
    started = time.time()
    metrics = trainer.fit().metrics
    return {"workers": workers, "cpus_per_worker": cpus, "samples_per_s": metrics["samples_per_s"],
            "tokens_per_s": metrics["tokens_per_s"], "trainer_start_to_first_step_s": metrics["first_step_unix"] - started,
            "wall_s": time.time() - started}


# ------------------------------------------------------------------------------ Ray: sweep overhead


def bench_sweep(settings: Settings) -> dict[str, Any]:
    """``python -m platform.tune --smoke`` as a user runs it, timed from its launch: when each
    trial's MLflow run opened and when its first training step began (the ``num_parameters``
    metric that ``platform.train.RayHooks.wrap`` logs right before the first step)."""
    if not ray_available():
        return dict(SKIPPED_NO_RAY)
    from platform import train

    dataset_dir = train.resolve_data("demo", quiet=True)
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as scratch:
        uri, experiment = f"sqlite:///{scratch}/mlflow.db", "bench-sweep"
        command = [sys.executable, "-m", "platform.tune", "--space", "baseline", "--smoke", "--num-samples",
                   str(settings.sweep_samples), "--data", str(dataset_dir), "--experiment", experiment,
                   "--tracking-uri", uri, "--storage-path", f"{scratch}/runs", "--name", "bench-sweep"]
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": os.environ.get("RAY_USAGE_STATS_ENABLED", "0")}
        started = time.time()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        finished = time.time()
        if done.returncode != 0:
            return {"error": f"platform.tune exited {done.returncode}: {done.stderr.strip()[-1500:]}"}
        return sweep_timings(uri, experiment, started, finished)


def sweep_timings(tracking_uri: str, experiment: str, started: float, finished: float) -> dict[str, Any]:
    """Start-up times of a sweep's trials from its MLflow store (seconds; ``started`` = launch)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id]) if found else []
    trials = []
    for run in sorted((r for r in runs if "trial_id" in r.data.tags), key=lambda r: r.info.start_time):
        opened = run.info.start_time / 1e3
        ready = client.get_metric_history(run.info.run_id, "num_parameters")
        first_step = min(m.timestamp for m in ready) / 1e3 if ready else None
        trials.append({"trial": run.data.tags["trial_id"], "run_opened_s": opened - started,
                       "first_step_s": first_step - started if first_step else None,
                       "startup_s": first_step - opened if first_step else None,
                       "duration_s": (run.info.end_time - run.info.start_time) / 1e3 if run.info.end_time else None})
    firsts = [t["first_step_s"] for t in trials if t["first_step_s"] is not None]
    startups = [t["startup_s"] for t in trials if t["startup_s"] is not None]
    return {"num_trials": len(trials), "tune_start_to_first_step_s": min(firsts) if firsts else None,
            "tune_start_to_first_trial_run_s": min((t["run_opened_s"] for t in trials), default=None),
            "median_trial_startup_s": statistics.median(startups) if startups else None,
            "sweep_wall_s": finished - started, "trials": trials}


# ------------------------------------------------------------------------------ targets


def evaluate_targets(report: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Every target of the issue with what was measured: met True/False, or None if not measured."""
    models = {k: v for k, v in report.get("models", {}).items() if isinstance(v, dict)}  # not {"error": ...}
    rates = {name: entry.get("tokens_per_s_rounds") for name, entry in models.items()}
    rates[REFERENCE] = report.get("reference", {}).get("tokens_per_s_rounds")
    targets: dict[str, Any] = {}
    for key, (model, against, minimum) in RATIO_TARGETS.items():
        measured = median_ratio(rates[model], rates[against]) if rates.get(model) and rates.get(against) else None
        targets[key] = {"target": minimum, "measured": measured, "met": None if measured is None else measured >= minimum}
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


# ------------------------------------------------------------------------------ tables


def _fmt(value: Any, spec: str = ",.0f") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return format(value, spec)


def print_models(result: dict[str, Any]) -> None:
    print(f"\ntraining throughput, batch {result['batch']['sentences']}×{result['batch']['length']} "
          f"({result['batch']['target_tokens']} target tokens); medians over rounds")
    print(f"{'model':<22}{'params':>12}{'tokens/s':>11}{'vs transformer':>16}{'vs nn.Transformer':>19}{'MFU':>8}")
    rows = {**result["models"], REFERENCE: {**result["reference"],
                                            "tokens_per_s": result["reference"]["torch_nn_transformer_tokens_per_s"]}}
    for name, entry in rows.items():
        print(f"{name:<22}{entry['params']:>12,}{entry['tokens_per_s']:>11,.0f}{_fmt(entry['ratio_vs_transformer'], '.2f'):>15}x"
              f"{_fmt(entry['ratio_vs_reference'], '.2f'):>18}x{_fmt(entry.get('mfu'), '.1%'):>8}")


def print_decode(result: dict[str, Any]) -> None:
    print(f"\nbeam-{result['beam']} decoding of {result['sentences']} sentences of {result['source_length']} subwords "
          f"(up to {result['max_output_length']} output tokens)")
    print(f"{'model':<14}{'cached sent/s':>15}{'full sent/s':>13}{'speed-up':>10}{'same output':>13}")
    for name in ("transformer", "dbsa"):
        entry = result[name]
        print(f"{name:<14}{entry['incremental_sentences_per_s']:>15.2f}{entry['full_recompute_sentences_per_s']:>13.2f}"
              f"{entry['speedup']:>9.2f}x{_fmt(entry['same_hypotheses']):>13}")


def print_trees(result: dict[str, Any]) -> None:
    print(f"\ntree encoders, batch {result['batch']} (lengths {result['lengths']}), dim {result['dim']}, fwd+bwd")
    print(f"{'encoder':<20}{'batched ms':>12}{'per-sentence ms':>17}{'speed-up':>10}{'≥5x':>6}")
    for name, entry in result.items():
        if isinstance(entry, dict):
            print(f"{name:<20}{entry['batched_ms']:>12.1f}{entry['per_sentence_ms']:>17.1f}{entry['speedup']:>9.1f}x"
                  f"{_fmt(entry['met']):>6}")


def print_ddp(result: dict[str, Any]) -> None:
    print(f"\nRay Train DDP, {result['model']} on the {result['data']} corpus")
    print(f"{'workers':<10}{'CPUs each':>10}{'samples/s':>11}{'tokens/s':>10}{'start→1st step s':>18}")
    for key in ("workers_1", "workers_2"):
        entry = result[key]
        print(f"{entry['workers']:<10}{entry['cpus_per_worker']:>10}{entry['samples_per_s']:>11.1f}"
              f"{entry['tokens_per_s']:>10.0f}{entry['trainer_start_to_first_step_s']:>18.1f}")
    print(f"2 workers vs 1: {result['speedup_2_vs_1']:.2f}x")


def print_sweep(result: dict[str, Any]) -> None:
    print(f"\nsweep overhead (python -m platform.tune --smoke, {result['num_trials']} trials, "
          f"{result['sweep_wall_s']:.0f} s in all)")
    print(f"tune start → first training step: {_fmt(result['tune_start_to_first_step_s'], '.1f')} s; "
          f"median trial start-up (run opened → first step): {_fmt(result['median_trial_startup_s'], '.1f')} s")


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
    parser = argparse.ArgumentParser(prog="python -m platform.bench", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the model sections run")
    parser.add_argument("--out", metavar="FILE.json", help="write the results as JSON")
    parser.add_argument("--only", help=f"comma-separated sections (default all): {','.join(SECTIONS)}")
    parser.add_argument("--skip-ray", action="store_true", help=f"skip the Ray sections ({', '.join(RAY_SECTIONS)})")
    parser.add_argument("--quick", action="store_true", help="small batches, few steps: a quick look, not a measurement")
    parser.add_argument("--size", choices=list(TRANSFORMER_SIZES), help="model size (default small on CPU, paper on CUDA)")
    parser.add_argument("--tokens", type=int, help="target tokens per training batch (default 2048 CPU, 16384 CUDA)")
    parser.add_argument("--length", type=int, help="positions per sentence (default 32 CPU, 64 CUDA)")
    parser.add_argument("--vocab", type=int, help="source and target vocabulary (default 8000)")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                        help="bf16 autocast (default: on for CUDA)")
    parser.add_argument("--warmup", type=int, help="untimed steps per model")
    parser.add_argument("--steps", type=int, help="timed steps per model and round")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (medians over them)")
    parser.add_argument("--models", help="comma-separated models to time (default all)")
    parser.add_argument("--peak-flops", type=float, help="the device's peak FLOP/s for MFU (default: known GPUs, bf16)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default on CPU: 1, as OpenMP threads on a shared "
                                                    "machine stall each other; on CUDA: torch's)")
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


def finite(value: Any) -> Any:
    """``value`` with NaN/inf floats as None (strict JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
