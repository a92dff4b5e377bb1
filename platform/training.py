"""The training step, evaluation and checkpoints as plain functions (no Ray; DESIGN.md §5).

Ray Train only wraps these (``platform.train``), so unit tests call them directly.

Loss (Deguchi et al. eq. 18): label-smoothed token cross-entropy ``e_tok`` plus, for models
with parse heads, ``λ_enc e_enc + λ_dec e_dec`` (cross-entropy of the parse attention towards
each token's head; decoder side only where the head is not in the future).  Every term is a
sum divided by its *global* count (all-reduced over DDP ranks), so k workers taking shares of
a batch compute exactly the gradient one worker would on the whole batch.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models import MODELS, build_model
from models.dbsa import IGNORE_INDEX, decoder_parse_targets, encoder_parse_targets
from models.inputs import BOS_ID, EOS_ID, PAD_ID, ModelOutput, Source
from models.rnn import RNNConfig
from models.search import beam_search, greedy_search
from models.transformer import TransformerConfig
from platform import config as config_io
from platform import recipes
from platform.batching import Batch, BatchingConfig, ParquetExamples, ShardedBatches
from platform.errors import ConfigError
from platform.metrics import head_accuracy, translation_scores
from platform.subwords import SubwordModel

# ----------------------------------------------------------------------------------- configs


@dataclass(frozen=True, kw_only=True)
class OptimConfig:
    lr: float = 1e-3  # peak learning rate, reached at the end of warm-up
    warmup_steps: int = 400  # inverse-square-root schedule of Vaswani et al. (paper: 4000)
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 1.0  # 0 disables gradient clipping
    label_smoothing: float = 0.1

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.warmup_steps < 0:
            raise ValueError("lr must be positive and warmup_steps non-negative")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    beam: int = 1  # 1 = greedy decoding of the dev set each epoch
    alpha: float = 0.6  # length penalty (Wu et al. 2016)
    max_len_a: float = 1.5
    max_len_b: int = 10
    max_sentences: int | None = None  # decode only the first N dev sentences (None = all)
    max_tokens: int = 4000  # dev batch budget


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    model: TransformerConfig | RNNConfig
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    max_epochs: int = 10
    max_steps_per_epoch: int | None = None  # cut epochs short (smoke runs)
    patience: int | None = None  # stop after this many epochs without a better dev_bleu
    seed: int = 1

    def __post_init__(self) -> None:
        if self.max_epochs < 1:
            raise ValueError(f"max_epochs must be ≥ 1, got {self.max_epochs}")


# CPU-sized defaults: what ``python -m platform.train --model NAME`` uses without --set.
CPU_SIZE = {
    "transformer": dict(num_encoder_layers=3, num_decoder_layers=3, d_model=256, num_heads=4, d_ff=1024, dropout=0.1),
    "rnn": dict(d_embed=256, d_hidden=256, dropout=0.2),
}
SWEEP_SIZE = {  # the default of platform.tune on a CPU: many short trials
    "transformer": dict(num_encoder_layers=2, num_decoder_layers=2, d_model=128, num_heads=4, d_ff=512, dropout=0.1),
    "rnn": dict(d_embed=128, d_hidden=128, dropout=0.2),
}
SMOKE_SIZE = {
    "transformer": dict(num_encoder_layers=2, num_decoder_layers=2, d_model=32, num_heads=4, d_ff=64, dropout=0.1),
    "rnn": dict(d_embed=32, d_hidden=32, dropout=0.1),
}
# The rest of a run's defaults per size.  CPU: small batches and a short warm-up, so the demo
# corpus gets ~250 updates per epoch.
RUN_PRESETS = {
    "cpu": {"batching": {"max_tokens": 1500}, "optim": {"warmup_steps": 200}},
    "paper": {"batching": {"max_tokens": 4096}, "optim": {"lr": 7e-4, "warmup_steps": 4000}},
    "sweep": {"max_epochs": 4, "max_steps_per_epoch": 100, "eval": {"max_sentences": 200},
              "batching": {"max_tokens": 1500}, "optim": {"warmup_steps": 100}},
    "smoke": {"max_epochs": 2, "max_steps_per_epoch": 8, "eval": {"max_sentences": 40},
              "optim": {"warmup_steps": 10}, "batching": {"max_tokens": 1024}},
}


def model_defaults(name: str, size: str, recipe: str | None = None) -> dict[str, Any]:
    """The model section a run starts from: the model's preset, its recipe (``platform/recipes.py``;
    the model's default recipe when None), then the size's dimensions (the recipe's own under
    ``paper``).  Fractional parse layers (``4/6``) stay fractions until ``load_train_config``."""
    if name not in MODELS:
        raise ConfigError(f"unknown model {name!r}; available: {', '.join(MODELS)}")
    recipe_name, found = recipes.recipe_for(name, recipe)
    family = "rnn" if MODELS[name].config_class is RNNConfig else "transformer"
    table = {"smoke": SMOKE_SIZE, "sweep": SWEEP_SIZE, "cpu": CPU_SIZE}.get(size)
    dims = found.paper_size if table is None else table[family]
    return {**MODELS[name].preset, **found.settings, **dims}


def load_train_config(data: dict[str, Any]) -> TrainConfig:
    """Strictly build a TrainConfig; ``model.name`` chooses the model's config class."""
    data = dict(data)
    model = data.pop("model", None)
    if not isinstance(model, dict) or "name" not in model:
        raise ConfigError("the config needs a model section with a name")
    if model["name"] not in MODELS:
        raise ConfigError(f"unknown model {model['name']!r}; available: {', '.join(MODELS)}")
    config_class = MODELS[model["name"]].config_class
    layer_counts = {f.name: f.default for f in dataclasses.fields(config_class) if f.name in recipes.LAYER_KEYS.values()}
    model = recipes.resolve_layers(model, layer_counts)  # p_enc: 4/6 → a layer of this model
    model_config = config_io.from_dict(config_class, model, where="model")
    try:
        model_config.validate()
    except ValueError as error:
        raise ConfigError(f"model: {error}") from None
    return config_io.from_dict(TrainConfig, {**data, "model": model_config})


# ------------------------------------------------------------------------------ the context


@dataclass
class Context:
    """Where this process trains: rank, world size, device, and how to sum across ranks."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    all_reduce: Callable[[Tensor], Tensor] = lambda t: t  # sum over ranks (identity alone)

    @property
    def autocast(self) -> bool:
        return self.device.type == "cuda"

    @classmethod
    def from_torch_distributed(cls, device: torch.device) -> "Context":
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return cls(device=device)

        def reduce(tensor: Tensor) -> Tensor:
            tensor = tensor.clone()
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            return tensor

        return cls(rank=dist.get_rank(), world_size=dist.get_world_size(), device=device, all_reduce=reduce)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


# ------------------------------------------------------------------------ batches and loss


def to_source(batch: Batch) -> Source:
    return Source(ids=batch.src_ids, lengths=batch.src_lengths, depth=batch.src_depth, tree_parent=batch.src_tree_parent)


def teacher_forcing(batch: Batch) -> tuple[Tensor, Tensor]:
    """tgt_in = BOS y1..yn (PAD after), tgt_out = y1..yn EOS (PAD after): both [B, T+1]."""
    batch_size = batch.tgt_ids.shape[0]
    bos = torch.full((batch_size, 1), BOS_ID, dtype=batch.tgt_ids.dtype, device=batch.tgt_ids.device)
    tgt_in = torch.cat([bos, batch.tgt_ids], dim=1)
    tgt_out = torch.cat([batch.tgt_ids, torch.full_like(bos, PAD_ID)], dim=1)
    tgt_out[torch.arange(batch_size, device=tgt_out.device), batch.tgt_lengths] = EOS_ID
    return tgt_in, tgt_out


@dataclass
class LossSums:
    """Sums and counts of the three loss terms of one batch on one rank."""

    token_loss: Tensor  # label-smoothed
    token_nll: Tensor  # plain NLL (for dev_loss / perplexity)
    num_tokens: Tensor
    enc_loss: Tensor
    enc_count: Tensor
    dec_loss: Tensor
    dec_count: Tensor

    def counts(self) -> Tensor:
        return torch.stack([self.num_tokens, self.enc_count, self.dec_count]).float()

    def nonfinite(self, lambda_enc: float = 0.0, lambda_dec: float = 0.0) -> Tensor:
        """1.0 if a loss term of the objective (one with a non-zero weight) is NaN/inf here, else 0.0."""
        terms = [self.token_loss] + [loss for loss, weight in ((self.enc_loss, lambda_enc), (self.dec_loss, lambda_dec))
                                     if weight]
        return (~torch.isfinite(torch.stack([t.detach().float() for t in terms]))).any().float()


def parse_targets(batch: Batch, model_config) -> tuple[Tensor, Tensor]:
    """The parse heads' targets of ``batch``: encoder [B, S], decoder [B, T+1] (models/dbsa.py)."""
    supervise = getattr(model_config, "dec_parse_target", "output")
    return encoder_parse_targets(batch.src_heads), decoder_parse_targets(batch.tgt_heads, supervise)


def loss_sums(output: ModelOutput, batch: Batch, tgt_out: Tensor, label_smoothing: float, model_config=None) -> LossSums:
    logits = output.logits.float().reshape(-1, output.logits.shape[-1])  # [B·T, V]
    targets = tgt_out.reshape(-1)
    token_loss = F.cross_entropy(logits, targets, ignore_index=PAD_ID, label_smoothing=label_smoothing, reduction="sum")
    token_nll = F.cross_entropy(logits.detach(), targets, ignore_index=PAD_ID, reduction="sum")
    zero = token_loss.new_zeros(())
    enc_targets, dec_targets = parse_targets(batch, model_config)
    enc_loss, enc_count = _parse_loss(output.enc_parse_logprobs, enc_targets, zero)
    dec_loss, dec_count = _parse_loss(output.dec_parse_logprobs, dec_targets, zero)
    return LossSums(token_loss, token_nll, (targets != PAD_ID).sum(), enc_loss, enc_count, dec_loss, dec_count)


def _parse_loss(logprobs: Tensor | None, targets: Tensor, zero: Tensor) -> tuple[Tensor, Tensor]:
    """Eq. 17: −Σ log A_parse[i, head(i)] over supervised positions."""
    if logprobs is None:
        return zero, zero.long()
    if logprobs.shape[1] != targets.shape[1]:  # decoder targets cover BOS..y_T, logits may be shorter
        targets = targets[:, : logprobs.shape[1]]
    flat = logprobs.float().reshape(-1, logprobs.shape[-1])
    loss = F.nll_loss(flat, targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum")
    return loss, (targets != IGNORE_INDEX).sum()


def combine(sums: LossSums, global_counts: Tensor, model_config, world_size: int) -> Tensor:
    """e_tok + λ_enc e_enc + λ_dec e_dec, each normalised by its global count; × world size
    because DDP averages gradients over ranks."""
    tokens, enc, dec = (c.clamp(min=1.0) for c in global_counts)
    loss = sums.token_loss / tokens
    lambda_enc = getattr(model_config, "lambda_enc", 0.0)
    lambda_dec = getattr(model_config, "lambda_dec", 0.0)
    if lambda_enc:
        loss = loss + lambda_enc * sums.enc_loss / enc
    if lambda_dec:
        loss = loss + lambda_dec * sums.dec_loss / dec
    return loss * world_size


# ------------------------------------------------------------------------------- training


def inverse_sqrt_schedule(warmup_steps: int) -> Callable[[int], float]:
    """Vaswani et al. §5.3, scaled to peak 1: min(step / warmup, sqrt(warmup / step))."""

    def factor(step: int) -> float:
        step = max(step, 1)
        if warmup_steps == 0:
            return 1.0 / math.sqrt(step)
        return min(step / warmup_steps, math.sqrt(warmup_steps / step))

    return factor


def build_training(config: TrainConfig, src_vocab: int, tgt_vocab: int, ctx: Context):
    """Model, optimizer and scheduler for ``config`` on ``ctx.device``, seeded."""
    seed_everything(config.seed)
    model = build_model(config.model, src_vocab, tgt_vocab).to(ctx.device)
    optim = config.optim
    optimizer = torch.optim.Adam(model.parameters(), lr=optim.lr, betas=optim.betas, eps=optim.eps,
                                 weight_decay=optim.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, inverse_sqrt_schedule(optim.warmup_steps))
    return model, optimizer, scheduler


@dataclass
class StepResult:
    loss: float  # combined loss per target token (this rank's estimate)
    num_tokens: int  # global target tokens of the step
    grad_norm: float


class Diverged(FloatingPointError):
    """The loss became NaN/inf: training stops for good (a restart would diverge again)."""


def train_step(model: nn.Module, optimizer, scheduler, batch: Batch, config: TrainConfig, ctx: Context) -> StepResult:
    """One optimizer update on ``batch`` (this rank's share of the global batch)."""
    model.train()
    batch = batch.to(ctx.device)
    tgt_in, tgt_out = teacher_forcing(batch)
    with torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=ctx.autocast):
        output = model(to_source(batch), tgt_in)
    sums = loss_sums(output, batch, tgt_out, config.optim.label_smoothing, config.model)
    # one all-reduce carries the global counts and how many ranks saw a non-finite loss, so
    # every rank stops at the same step (a rank raising alone would leave the others in DDP)
    weights = getattr(config.model, "lambda_enc", 0.0), getattr(config.model, "lambda_dec", 0.0)
    reduced = ctx.all_reduce(torch.cat([sums.counts(), sums.nonfinite(*weights).reshape(1)]))
    global_counts, bad_ranks = reduced[:3], int(reduced[3])
    loss = combine(sums, global_counts, config.model, ctx.world_size)
    if bad_ranks or not torch.isfinite(loss):
        raise Diverged(f"loss became {float(loss.detach())} on {max(bad_ranks, 1)} of {ctx.world_size} rank(s)")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.optim.clip_norm or float("inf"))
    optimizer.step()
    scheduler.step()
    # this rank's loss × world size / global count: the global mean when the ranks' shares are even
    return StepResult(loss=float(loss.detach()), num_tokens=int(global_counts[0]), grad_norm=float(norm))


# ----------------------------------------------------------------------------- evaluation


@dataclass
class Evaluation:
    metrics: dict[str, float]
    hypotheses: list[str]  # tokenized (words separated by spaces), in dev order
    signature: str


@torch.no_grad()
def evaluate(model: nn.Module, examples: ParquetExamples, config: TrainConfig, tgt_model: SubwordModel, tgt_lang: str,
             ctx: Context, prefix: str = "dev", beam: int | None = None) -> Evaluation:
    """Loss, UAS of parse heads (teacher-forced) and decoding of ``examples`` (first
    ``eval.max_sentences``), on one process (rank 0): pass the unwrapped model, not DDP."""
    model.eval()
    limit = min(len(examples), config.eval.max_sentences or len(examples))
    order = np.argsort(examples.src_lengths[:limit], kind="stable")  # similar lengths batch well
    totals = {"nll": 0.0, "tokens": 0, "enc": [0, 0], "dec": [0, 0]}
    hypotheses: dict[int, str] = {}
    for indices in _eval_batches(order, examples, config.eval.max_tokens):
        batch = examples.collate(indices).to(ctx.device)
        _score_batch(model, batch, totals, config.model)
        for index, text in zip(indices.tolist(), _decode(model, batch, config, tgt_model, beam)):
            hypotheses[index] = text
    ordered = [hypotheses[i] for i in range(limit)]
    references = examples.texts["tgt_text"][:limit]
    scores = translation_scores(ordered, references, tgt_lang)
    metrics = {f"{prefix}_loss": totals["nll"] / max(totals["tokens"], 1), **scores.as_metrics(prefix)}
    for side in ("enc", "dec"):
        correct, counted = totals[side]
        if counted:
            metrics[f"{prefix}_uas_{side}"] = correct / counted
    return Evaluation(metrics=metrics, hypotheses=ordered, signature=scores.signature)


def _eval_batches(order: np.ndarray, examples: ParquetExamples, max_tokens: int):
    start = 0
    while start < len(order):
        end, longest = start, 0
        while end < len(order):
            longest = max(longest, int(max(examples.src_lengths[order[end]], examples.tgt_lengths[order[end]])) + 1)
            if end > start and longest * (end - start + 1) > max_tokens:
                break
            end += 1
        yield order[start:end]
        start = end


def _score_batch(model: nn.Module, batch: Batch, totals: dict, model_config) -> None:
    tgt_in, tgt_out = teacher_forcing(batch)
    output = model(to_source(batch), tgt_in)
    sums = loss_sums(output, batch, tgt_out, label_smoothing=0.0, model_config=model_config)
    enc_targets, dec_targets = parse_targets(batch, model_config)
    totals["nll"] += float(sums.token_nll)
    totals["tokens"] += int(sums.num_tokens)
    for side, logprobs, targets in (("enc", output.enc_parse_logprobs, enc_targets),
                                    ("dec", output.dec_parse_logprobs, dec_targets)):
        if logprobs is not None:
            correct, counted = head_accuracy(logprobs, targets[:, : logprobs.shape[1]])
            totals[side][0] += correct
            totals[side][1] += counted


def _decode(model: nn.Module, batch: Batch, config: TrainConfig, tgt_model: SubwordModel, beam: int | None) -> list[str]:
    beam = beam or config.eval.beam
    options = dict(alpha=config.eval.alpha, max_len_a=config.eval.max_len_a, max_len_b=config.eval.max_len_b)
    src = to_source(batch)
    if beam == 1:
        hypotheses = greedy_search(model, src, **options)
    else:
        hypotheses = [hyps[0] for hyps in beam_search(model, src, beam=beam, **options)]
    return [tgt_model.decode(h.tokens) for h in hypotheses]


# ---------------------------------------------------------------------------- checkpoints

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_FORMAT = 2
# models whose computation changed with checkpoint format 2 (the paper-fidelity fixes: DBSA's
# scaled biaffine, Yang's single attention and β from h̃, Gumbel's attended leaves, word-level
# depths): their format-1 weights would now compute something else, so they are refused
CHANGED_IN_FORMAT_2 = ("dbsa", "deprel", "hier_tree_gru", "gumbel_tree")


def checkpoint_state(model: nn.Module, optimizer, scheduler, sampler: ShardedBatches, config: TrainConfig,
                     progress: dict[str, Any], subword_models: dict[str, bytes], dataset_meta: dict[str, Any]) -> dict:
    """Everything needed to continue or to use the model: plain types and tensors only, so it
    loads with ``torch.load(weights_only=True)``."""
    module = model.module if hasattr(model, "module") else model
    return {
        "format_version": CHECKPOINT_FORMAT,
        "model": module.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "sampler": sampler.state_dict(),
        "config": config_io.dump_yaml(config),
        "progress": progress,
        "subword_models": {side: torch.frombuffer(bytearray(blob), dtype=torch.uint8) for side, blob in subword_models.items()},
        "dataset_meta": {"src_lang": dataset_meta["src_lang"], "tgt_lang": dataset_meta["tgt_lang"],
                         "vocab_size": dataset_meta["vocab_size"], "config": dataset_meta["config"]},
        "rng": {"torch": torch.get_rng_state(), "numpy_seed": int(np.random.randint(0, 2 ** 31 - 1))},
    }


def save_checkpoint(state: dict, path: str | Path) -> Path:
    """Write atomically (a temporary file renamed), so a crash never leaves half a checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())  # the bytes are on disk before the name points at them
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_directory(path.parent)
    return path


def fsync_directory(directory: str | Path) -> None:
    """Make a rename in ``directory`` durable (best effort where directories cannot be opened)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> dict:
    """Load with ``weights_only=True``: tensors and plain containers only, no arbitrary pickle."""
    return torch.load(Path(path), map_location=device, weights_only=True)


def config_from_checkpoint(state: dict) -> TrainConfig:
    config = load_train_config(config_io.yaml_load(state["config"]))
    version = state.get("format_version", 1)
    if version < CHECKPOINT_FORMAT and config.model.name in CHANGED_IN_FORMAT_2:
        raise IncompatibleCheckpoint(f"checkpoint format {version} of a {config.model.name} model predates the "
                                     "paper-fidelity fixes (README, Models), which change what its weights compute; "
                                     "train it again")
    return config


def subword_models_from_checkpoint(state: dict) -> dict[str, SubwordModel]:
    return {side: SubwordModel(bytes(tensor.numpy().tobytes())) for side, tensor in state["subword_models"].items()}


def model_from_checkpoint(state: dict, device: torch.device | str = "cpu") -> tuple[nn.Module, TrainConfig]:
    config = config_from_checkpoint(state)
    vocab = state["dataset_meta"]["vocab_size"]
    model = build_model(config.model, vocab["src"], vocab["tgt"])
    load_weights(model, state["model"], "the checkpoint")
    return model.to(device).eval(), config


class IncompatibleCheckpoint(ConfigError):
    pass


def load_weights(model: nn.Module, weights: dict[str, Tensor], what: str) -> None:
    """``load_state_dict`` with a one-line reason when the checkpoint was made by another config."""
    own = model.state_dict()
    missing = [key for key in own if key not in weights]
    unexpected = [key for key in weights if key not in own]
    shapes = [f"{key} {tuple(weights[key].shape)} vs {tuple(own[key].shape)}" for key in own
              if key in weights and weights[key].shape != own[key].shape]
    if missing or unexpected or shapes:
        detail = "; ".join(part for part in (
            f"missing {', '.join(missing[:3])}" if missing else "",
            f"unexpected {', '.join(unexpected[:3])}" if unexpected else "",
            f"shape {', '.join(shapes[:3])}" if shapes else "") if part)
        raise IncompatibleCheckpoint(f"{what} does not fit this model config ({detail})")
    model.load_state_dict(weights)


def restore(state: dict, model: nn.Module, optimizer, scheduler, sampler: ShardedBatches) -> dict[str, Any]:
    """Load a checkpoint into live objects; returns the saved progress."""
    module = model.module if hasattr(model, "module") else model
    config_from_checkpoint(state)  # refuses a checkpoint whose model now computes differently
    load_weights(module, state["model"], "the checkpoint to resume")
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    sampler.load_state_dict(state["sampler"])
    torch.set_rng_state(state["rng"]["torch"])
    np.random.seed(state["rng"]["numpy_seed"])
    return state["progress"]


class Throughput:
    """Target tokens per second over an epoch."""

    def __init__(self) -> None:
        self.tokens, self.start = 0, time.perf_counter()

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    @property
    def per_second(self) -> float:
        return self.tokens / max(time.perf_counter() - self.start, 1e-9)
