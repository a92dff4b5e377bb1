"""The training loop, as a plain function: ``fit(config, dataset, ctx, hooks)``.

``platform.launch.worker`` runs it in each Ray Train worker with Ray hooks (DDP wrapping,
reporting, checkpoints through Ray); tests run it directly with ``training.hooks.LocalHooks``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from platform.data.batching import ShardedBatches
from platform.data.dataset import PreparedDataset
from platform.data.prefetch import Prefetched
from platform.data.subwords import SubwordModel
from platform.training.checkpoint import (
    IncompatibleCheckpoint,
    checkpoint_state,
    load_weights,
    restore,
)
from platform.training.config import TrainConfig, check_dataset
from platform.training.context import Context
from platform.training.evaluate import evaluate
from platform.training.hooks import Hooks
from platform.training.lines import progress_line, update_line
from platform.training.metrics import SHOWN, shown
from platform.training.step import Diverged, build_training, compile_count, train_step
from platform.training.stopping import STOPPED_EARLY, early_stopping_reason, should_stop, update_best


def fit(config: TrainConfig, dataset: PreparedDataset, ctx: Context, hooks: Hooks, log=print,
        started_at: float | None = None, init: dict | None = None) -> list[dict[str, float]]:
    """Train until ``max_epochs`` or ``max_updates`` (or early stopping); returns the history of
    reports (one per validation or checkpoint).

    Every ``log_every`` updates, rank 0 writes a progress line and ``hooks.progress`` gets the
    train metrics of those updates.  A report (``hooks.report``, with the checkpoint) comes at
    each validation (every ``validate_every`` updates, or at each epoch's end) and every
    ``save_every`` updates; the last update always gets one.  A report's metrics say where its
    time went: ``steps_s`` (updates, batches included) and ``eval_s`` (dev decoding and
    scoring); with ``started_at`` (a ``time.time()`` of the launch), the first report of this
    process also has ``startup_s``, the seconds from the launch to the first update, and
    ``first_step_at`` (its ``time.time()``).

    ``init`` (``launch.init_from``: ``weights``, optionally ``optimizer`` and ``scheduler``,
    and their ``source``) starts a new run from other weights; it is validated before the first
    update (dev metrics at update 0).  A run that resumes from its own checkpoint ignores it."""
    ctx = ctx.with_precision(config.precision)
    check_dataset(config, dataset.meta, "the dataset")
    sampler = ShardedBatches(dataset.train, config.batching, rank=ctx.rank, world_size=ctx.world_size)
    vocab = dataset.meta["vocab_size"]
    model, optimizer, scheduler = build_training(config, vocab["src"], vocab["tgt"], ctx)
    progress = new_progress()
    state = hooks.resume()
    if state is not None:
        check_subwords(state, dataset)
        progress = restore(state, model, optimizer, scheduler, sampler, ctx.scaler)
        started_at = None  # a restart: its start-up is not the launch's
        log(f"resumed from epoch {progress['epoch']} (update {progress['step']})")
    elif init is not None:
        start_from(init, model, optimizer, scheduler)
    run = _Run(model, hooks.wrap(model), optimizer, scheduler, sampler, config, ctx, hooks,
               dataset, progress, log)
    if state is None and init is not None:
        run.validate_start(init["source"])
    run.window.started_at = started_at
    run.train()
    return progress["history"]


def start_from(init: dict, model, optimizer, scheduler) -> None:
    """The weights of another run (and its optimiser and schedule, where given)."""
    load_weights(model, init["weights"], f"--init-from {init['source']}")
    if init.get("optimizer") is not None:
        optimizer.load_state_dict(init["optimizer"])
        scheduler.load_state_dict(init["scheduler"])


def new_progress() -> dict:
    """A run's counters, saved in every checkpoint: completed ``epoch``s, updates (``step``),
    updates into the current epoch, the report history, and the best ``best_metric`` so far."""
    return {"epoch": 0, "step": 0, "epoch_step": 0, "history": [], "best": None, "best_step": 0, "best_epoch": 0,
            "bad_validations": 0}


def check_subwords(state: dict, dataset: PreparedDataset) -> None:
    """A checkpoint resumes only on data encoded with its own subword models."""
    for side, blob in dataset.subword_bytes.items():
        saved = state.get("subword_models", {}).get(side)
        if saved is not None and bytes(saved.numpy().tobytes()) != blob:
            raise IncompatibleCheckpoint(
                f"{dataset.directory} was prepared with other {side} subword models than the checkpoint to resume; "
                "encode it with `platform.prepare --subwords-from` the checkpoint's dataset, "
                "or train under a new --name")


# what every ``log_every`` updates logs (``Hooks.progress``), beside the reports' own metrics
UPDATE_METRICS = ("train_loss", "grad_norm", "tokens_per_s", "tokens_per_update", "data_wait_share", "lr", "epoch")


@dataclass
class _Window:
    """The train metrics since a time mark: loss, gradient norm and tokens per update."""

    began: float = field(default_factory=time.perf_counter)
    loss: float = 0.0
    grad_norm: float = 0.0
    tokens: int = 0
    updates: int = 0
    wait_s: float = 0.0  # waiting for batches
    started_at: float | None = None  # the launch's time.time(), until the first update
    first_step_at: float | None = None

    def add(self, loss: float, grad_norm: float, tokens: int, wait_s: float) -> None:
        self.loss, self.grad_norm = self.loss + loss, self.grad_norm + grad_norm
        self.tokens, self.updates, self.wait_s = self.tokens + tokens, self.updates + 1, self.wait_s + wait_s

    def metrics(self) -> dict[str, float]:
        seconds = max(time.perf_counter() - self.began, 1e-9)
        count = max(self.updates, 1)
        return {"train_loss": self.loss / count, "grad_norm": self.grad_norm / count,
                "tokens_per_s": self.tokens / seconds, "tokens_per_update": self.tokens / count,
                "data_wait_share": self.wait_s / seconds}

    def reset(self) -> None:
        self.began, self.loss, self.grad_norm = time.perf_counter(), 0.0, 0.0
        self.tokens, self.updates, self.wait_s = 0, 0, 0.0


class _Run:
    """One process's training: updates, progress lines, reports and when to stop."""

    def __init__(self, model, trained, optimizer, scheduler, sampler, config: TrainConfig, ctx: Context,
                 hooks: Hooks, dataset: PreparedDataset, progress: dict, log):
        self.model, self.trained, self.optimizer, self.scheduler = model, trained, optimizer, scheduler
        self.sampler, self.config, self.ctx, self.hooks = sampler, config, ctx, hooks
        self.dataset, self.progress, self.log = dataset, progress, log
        self.tgt_model = SubwordModel(dataset.subword_bytes["tgt"]) if ctx.rank == 0 else None
        self.window, self.logged = _Window(), _Window()  # since the last report; since the last progress line
        self.began = time.perf_counter()
        self.start_step = progress["step"]
        self.reader: Prefetched | ShardedBatches = sampler  # where the batch position is read (checkpoints)
        self.waited = 0.0  # the reader's wait_s at the last update
        self.shapes: set[tuple] = set()  # the batch shapes trained on (compiled: each may compile)

    # --- the loop
    def train(self) -> None:
        while not self.finished():
            if self.train_epoch():
                return

    def finished(self) -> bool:
        done = self.progress
        return ((self.config.max_epochs is not None and done["epoch"] >= self.config.max_epochs)
                or (self.config.max_updates is not None and done["step"] >= self.config.max_updates))

    def train_epoch(self) -> bool:
        """The rest of the current epoch; True when training stops inside it."""
        self.sampler.set_epoch(self.progress["epoch"])
        per_epoch = self.updates_per_epoch()
        self.reader = Prefetched(self.sampler, self.config.batching.prefetch, pin=self.ctx.device.type == "cuda")
        self.waited = 0.0
        try:
            for batches in self.reader:
                self.update(batches)
                if self.progress["epoch_step"] >= per_epoch:
                    break  # its report is the epoch's
                if self.after_update(epoch_end=False):
                    return True
        finally:
            self.reader.close()
            self.reader = self.sampler
        self.progress["epoch"] += 1
        self.progress["epoch_step"] = 0
        self.sampler.set_epoch(self.progress["epoch"])  # a checkpoint from here resumes at the next epoch
        return self.after_update(epoch_end=True)

    def updates_per_epoch(self) -> int:
        per_epoch = len(self.sampler) // self.sampler.update_freq
        limit = self.config.max_steps_per_epoch
        return per_epoch if limit is None else min(per_epoch, limit)

    def update(self, batches) -> None:
        if self.window.started_at is not None and self.window.first_step_at is None:
            self.window.first_step_at = time.time()
        waited, self.waited = self.reader.wait_s - self.waited, self.reader.wait_s
        self.shapes.update((tuple(b.src_ids.shape), tuple(b.tgt_ids.shape)) for b in batches)
        try:
            result = train_step(self.trained, self.optimizer, self.scheduler, batches, self.config, self.ctx)
        except Diverged as error:
            reason = (f"diverged at epoch {self.progress['epoch'] + 1}, update {self.progress['step'] + 1}: "
                      f"{error}")
            if self.ctx.rank == 0:
                self.log(reason)
                self.hooks.diverged(reason)
            raise Diverged(reason) from None
        self.progress["step"] += 1
        self.progress["epoch_step"] += 1
        for window in (self.window, self.logged):
            window.add(result.loss, result.grad_norm, result.num_tokens, waited)
        every = self.config.log_every
        if every and self.progress["step"] % every == 0:
            self.log_progress()

    def after_update(self, epoch_end: bool) -> bool:
        """Validate, checkpoint and decide whether to stop, where due; True to stop."""
        step, config = self.progress["step"], self.config
        final = self.finished()
        validate = (final or (config.validate_every is None and epoch_end)
                    or (config.validate_every is not None and step % config.validate_every == 0))
        save = config.save_every is not None and step % config.save_every == 0
        if not (validate or save):
            return False
        stop = self.report(validate, final)
        return stop or final

    def validate_start(self, source: str) -> None:
        """Rank 0: the dev metrics of the loaded weights, before any update (at update 0)."""
        if self.ctx.rank != 0 or self.dataset.dev is None:
            return
        evaluation = evaluate(self.model, self.dataset.dev, self.config, self.tgt_model,
                              self.dataset.meta["tgt_lang"], self.ctx)
        self.hooks.progress(evaluation.metrics, 0)
        self.window.reset()  # the updates' time and throughput start now
        self.logged.reset()
        shown_now = "  ".join(f"{key} {SHOWN[key].format(evaluation.metrics[key])}" for key in shown("progress")
                              if key in evaluation.metrics)
        self.log(f"before training, from {source}: {shown_now}")

    # --- progress lines
    def log_progress(self) -> None:
        metrics = {**self.logged.metrics(), "lr": self.scheduler.get_last_lr()[0], "epoch": self.epoch_number()}
        self.logged.reset()
        if self.ctx.rank != 0:
            return
        self.hooks.progress(metrics, self.progress["step"])
        self.log(update_line(metrics, self.progress["step"], self.config, time.perf_counter() - self.began,
                             self.eta()))

    def epoch_number(self) -> int:
        """The epoch the last update belongs to, counted from 1."""
        return self.progress["epoch"] + (1 if self.progress["epoch_step"] else 0)

    def eta(self) -> float | None:
        """Seconds to the update limit (or the epoch limit) at this process's pace so far."""
        done = self.progress["step"] - self.start_step
        if done <= 0:
            return None
        per_update = (time.perf_counter() - self.began) / done
        left = self.updates_left()
        return None if left is None else left * per_update

    def updates_left(self) -> int | None:
        config, done = self.config, self.progress
        lefts = []
        if config.max_updates is not None:
            lefts.append(config.max_updates - done["step"])
        if config.max_epochs is not None:
            lefts.append((config.max_epochs - done["epoch"]) * self.updates_per_epoch() - done["epoch_step"])
        return max(0, min(lefts)) if lefts else None

    # --- reports
    def report(self, validate: bool, final: bool) -> bool:
        """Report (with the checkpoint) the updates since the last report; True to stop early."""
        began = time.perf_counter()
        metrics = self.report_metrics()
        evaluation = None
        if validate and self.ctx.rank == 0 and self.dataset.dev is not None:
            began = time.perf_counter()
            evaluation = evaluate(self.model, self.dataset.dev, self.config, self.tgt_model,
                                  self.dataset.meta["tgt_lang"], self.ctx)
            metrics.update(evaluation.metrics)
            metrics["eval_s"] = time.perf_counter() - began
        is_best = update_best(self.progress, metrics, self.config) if validate else False
        self.progress["history"].append({k: float(v) for k, v in metrics.items()})
        stop = validate and should_stop(self.progress, self.config, self.ctx)
        if stop:  # the last report says so: a sweep counts the trial complete, not pruned
            metrics[STOPPED_EARLY] = 1.0
        state = (checkpoint_state(self.model, self.optimizer, self.scheduler, self.reader, self.config,
                                  self.progress, self.dataset.subword_bytes, self.dataset.meta, self.ctx.scaler)
                 if self.ctx.rank == 0 else None)
        if self.ctx.rank == 0 and validate:
            self.log(progress_line(metrics, self.config))
        self.hooks.report(metrics, state, evaluation, is_best, final=final or stop)
        self.window.reset()
        self.logged.began += time.perf_counter() - began  # a progress line's tokens/s counts updates only
        if stop and self.ctx.rank == 0:
            self.log(early_stopping_reason(self.config))
        return stop

    def report_metrics(self) -> dict[str, float]:
        window = self.window
        metrics = {"epoch": self.epoch_number(), "step": self.progress["step"], **window.metrics(),
                   "update_freq": self.sampler.update_freq, "lr": self.scheduler.get_last_lr()[0],
                   "steps_s": time.perf_counter() - window.began, "batch_shapes": len(self.shapes)}
        if self.config.compile != "off":
            metrics["compiles"] = compile_count()
        if window.first_step_at is not None and window.started_at is not None:
            metrics["first_step_at"] = window.first_step_at
            metrics["startup_s"] = max(0.0, window.first_step_at - window.started_at)
            window.started_at = None
        return metrics
