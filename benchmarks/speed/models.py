"""``models``: training throughput of every model and of ``torch.nn.Transformer``, with MFU.

Every contender runs the platform's own update, ``platform.training.step.train_step`` (its loss,
optimizer, clipping and autocast), on one fixed random ``Batch`` — the step the trainer runs.
"""

from __future__ import annotations

import random
import statistics
from typing import Any

import torch
from torch import Tensor, nn

from benchmarks.speed.common import (
    REFERENCE,
    RNN_SIZES,
    TRANSFORMER_SIZES,
    Settings,
    _fmt,
    interleaved_seconds,
    median_ratio,
    peak_flops,
)
from models import MODELS, build_model, default_config
from models.inputs import ModelOutput, Source
from models.layers import Embedding
from models.rnn import RNNConfig
from models.transformer import TransformerConfig
from platform.data.tensors import Batch
from platform.training.config import OptimConfig, TrainConfig
from platform.training.context import Context
from platform.training.step import build_optimizer, train_step

# ------------------------------------------------------------------------------ models: data and loss


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


def random_batch(num_sentences: int, length: int, vocab: int, device: str, seed: int = 0) -> Batch:
    """A training ``Batch`` without padding (one length bucket) of random ids, depths, trees and
    dependency heads: every model's inputs and targets.  ``length`` positions per sentence on
    both sides: S = length source subwords, and length − 1 target words (+ BOS/EOS = length)."""
    generator = torch.Generator().manual_seed(seed)
    src = random_source(num_sentences, length, vocab, generator)
    words = torch.randint(4, vocab, (num_sentences, length - 1), generator=generator)
    src_heads = torch.randint(0, length, (num_sentences, length), generator=generator)
    tgt_heads = torch.randint(0, length - 1, (num_sentences, length - 1), generator=generator)
    unused = torch.full_like(words, -1)
    batch = Batch(indices=torch.arange(num_sentences), src_ids=src.ids, src_lengths=src.lengths, tgt_ids=words,
                  tgt_lengths=torch.full((num_sentences,), length - 1), src_heads=src_heads, tgt_heads=tgt_heads,
                  src_word=torch.full_like(src.ids, -1), tgt_word=unused, src_depth=src.depth,
                  tgt_depth=torch.zeros_like(words), src_tree_parent=src.tree_parent)
    return batch.to(device)


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
        self.transformer = nn.Transformer(d_model=d, nhead=config.num_heads,
                                          num_encoder_layers=config.num_encoder_layers,
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
    """A model with the platform's optimizer and one fixed batch; ``step()`` is one update by
    ``platform.training.step.train_step`` itself (autocast forward on CUDA, fp32 loss of eq. 18
    with the model's λ, clipping, Adam with the inverse-square-root schedule)."""

    def __init__(self, model: nn.Module, model_config, batch: Batch, settings: Settings):
        self.model, self.batch = model.to(settings.device).train(), batch
        self.config = TrainConfig(model=model_config, optim=OptimConfig())
        self.ctx = Context(device=torch.device(settings.device), precision="bf16" if settings.bf16 else "fp32")
        self.optimizer, self.scheduler = build_optimizer(self.model, self.config.optim)
        self.last_loss = float("nan")

    def step(self) -> None:
        result = train_step(self.model, self.optimizer, self.scheduler, self.batch, self.config, self.ctx)
        self.last_loss = result.loss

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
    # self Q,K,V,O; cross Q,O; FFN; cross K,V; then QKᵀ and AV of self- and cross-attention
    decoder_layer = (tgt * (8 * d * d + 4 * d * d + 4 * d * f) + src * 4 * d * d
                     + batch * (4 * tgt_len * tgt_len * d + 4 * tgt_len * src_len * d))
    generator = tgt * 2 * d * vocab
    return 3.0 * (config.num_encoder_layers * encoder_layer + config.num_decoder_layers * decoder_layer + generator)


def build_runners(settings: Settings, batch: Batch) -> dict[str, TrainingRunner]:
    runners = {}
    for name in settings.models:
        torch.manual_seed(0)
        config = model_config(name, settings.size)
        runners[name] = TrainingRunner(build_model(config, settings.vocab, settings.vocab), config, batch, settings)
    torch.manual_seed(0)
    baseline = model_config("transformer", settings.size)
    runners[REFERENCE] = TrainingRunner(ReferenceTransformer(baseline, settings.vocab, settings.vocab), baseline, batch,
                                        settings)
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
            "batch": {"sentences": settings.num_sentences, "length": settings.length,
                      "target_tokens": batch.num_tokens}}


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


def print_models(result: dict[str, Any]) -> None:
    print(f"\ntraining throughput, batch {result['batch']['sentences']}×{result['batch']['length']} "
          f"({result['batch']['target_tokens']} target tokens); medians over rounds")
    print(f"{'model':<22}{'params':>12}{'tokens/s':>11}{'vs transformer':>16}{'vs nn.Transformer':>19}{'MFU':>8}")
    rows = {**result["models"], REFERENCE: {**result["reference"],
                                            "tokens_per_s": result["reference"]["torch_nn_transformer_tokens_per_s"]}}
    for name, entry in rows.items():
        print(f"{name:<22}{entry['params']:>12,}{entry['tokens_per_s']:>11,.0f}"
              f"{_fmt(entry['ratio_vs_transformer'], '.2f'):>15}x{_fmt(entry['ratio_vs_reference'], '.2f'):>18}x"
              f"{_fmt(entry.get('mfu'), '.1%'):>8}")
