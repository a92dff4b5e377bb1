"""The training loop (``fit``): epochs and update limits, progress lines, validations and
checkpoints every N updates, the best-checkpoint metric, exact mid-epoch resuming, early stopping."""

import pytest
import torch
from helpers import tiny_config

from platform.data.dataset import PreparedDataset as Dataset
from platform.training.averaging import kept_files, kept_weights
from platform.training.context import Context
from platform.training.hooks import LocalHooks
from platform.training.loop import fit
from platform.training.retention import BEST, LAST


class FinalHooks(LocalHooks):
    """LocalHooks that also keep each report's ``final`` flag."""

    def __init__(self, directory, config):
        super().__init__(directory, config)
        self.finals = []

        self.best = []

    def report(self, metrics, state, evaluation, is_best, final=False):
        self.finals.append(final)
        self.best.append(is_best)
        super().report(metrics, state, evaluation, is_best, final)


def test_fit_runs_epochs_reports_metrics_and_resumes(demo_dataset, tmp_path):
    config = tiny_config(max_epochs=2, max_steps_per_epoch=3, eval={"max_sentences": 20})
    dataset = Dataset.open(demo_dataset)
    hooks = FinalHooks(tmp_path, config)
    lines = []
    history = fit(config, dataset, Context(), hooks, log=lines.append)
    assert [int(m["epoch"]) for m in history] == [1, 2]
    assert hooks.finals == [False, True]  # the end-of-run work goes before the last report (RayHooks)
    for key in ("train_loss", "dev_loss", "dev_bleu", "dev_chrf", "dev_bleu_tok", "dev_uas_enc", "dev_uas_dec",
                "tokens_per_s"):
        assert key in history[-1]
    assert lines[0].startswith("epoch 1/2  update 3  train_loss")
    assert (tmp_path / "last.pt").exists() and (tmp_path / "best.pt").exists()
    longer = tiny_config(max_epochs=3, max_steps_per_epoch=3, eval={"max_sentences": 20})
    resumed = fit(longer, dataset, Context(), LocalHooks(tmp_path, longer), log=lines.append)
    assert [int(m["epoch"]) for m in resumed] == [1, 2, 3]  # epochs 1-2 restored, 3 trained
    assert any(line.startswith("resumed from epoch 2") for line in lines)


def test_early_stopping_stops_when_dev_bleu_does_not_improve(demo_dataset, tmp_path):
    config = tiny_config(max_epochs=6, max_steps_per_epoch=1, patience=1, eval={"max_sentences": 5},
                         optim={"lr": 1e-9, "warmup_steps": 0})
    hooks = FinalHooks(tmp_path, config)
    history = fit(config, Dataset.open(demo_dataset), Context(), hooks, log=lambda line: None)
    assert len(history) < 6
    assert hooks.finals == [False] * (len(history) - 1) + [True]  # early stopping's last epoch is final too


def test_an_update_accumulates_update_freq_batches(demo_dataset, tmp_path):
    """``global_tokens`` 1200 with batches of ≤ 600 on one worker: 2 batches per update, and
    an update sees about twice a batch's tokens (logged as ``tokens_per_update``)."""
    dataset = Dataset.open(demo_dataset)
    one = tiny_config(max_epochs=1, max_steps_per_epoch=4, eval={"max_sentences": 5})
    single = fit(one, dataset, Context(), LocalHooks(tmp_path / "single", one), log=lambda line: None)[-1]
    config = tiny_config(batching={"global_tokens": 1200}, max_epochs=1, max_steps_per_epoch=4,
                         eval={"max_sentences": 5})
    accumulated = fit(config, dataset, Context(), LocalHooks(tmp_path / "accumulated", config),
                      log=lambda line: None)[-1]
    assert single["update_freq"] == 1 and accumulated["update_freq"] == 2
    assert accumulated["step"] == single["step"] == 4  # max_steps_per_epoch counts updates
    assert 1.6 * single["tokens_per_update"] < accumulated["tokens_per_update"] <= 1200


def test_update_limits_progress_lines_validations_and_save_points(demo_dataset, tmp_path):
    """Epochs of 4 updates, ``max_updates`` 7 and no epoch limit: a progress entry every 2
    updates, validations at updates 3 and 6 and at the last one (7), a checkpoint without
    validation at 5; the epoch's end (update 4) is no report of its own."""
    config = tiny_config(max_epochs=None, max_updates=7, max_steps_per_epoch=4, log_every=2, validate_every=3,
                         save_every=5, eval={"max_sentences": 5})
    hooks, lines = FinalHooks(tmp_path, config), []
    history = fit(config, Dataset.open(demo_dataset), Context(), hooks, log=lines.append)
    assert [int(m["step"]) for m in history] == [3, 5, 6, 7]
    assert [int(m["epoch"]) for m in history] == [1, 2, 2, 2]
    assert ["dev_bleu" in m for m in history] == [True, False, True, True]  # 5 only saves
    assert hooks.finals == [False, False, False, True]
    assert [step for step, _ in hooks.progressed] == [2, 4, 6]
    assert {"train_loss", "lr", "tokens_per_s", "grad_norm", "epoch"} <= set(hooks.progressed[0][1])
    assert [m["epoch"] for _, m in hooks.progressed] == [1, 1, 2]
    updates = [line for line in lines if line.startswith("update ")]
    assert [line.split()[1] for line in updates] == ["2/7", "4/7", "6/7"]
    assert all(" loss " in line and " lr " in line and " tok/s " in line and " eta " in line for line in updates)
    assert torch.load(tmp_path / "last.pt", weights_only=True)["progress"]["step"] == 7


def test_the_best_checkpoint_follows_best_metric_and_its_direction(demo_dataset, tmp_path):
    config = tiny_config(max_epochs=None, max_updates=8, validate_every=2, best_metric="dev_loss",
                         eval={"max_sentences": 5})
    hooks = FinalHooks(tmp_path, config)
    history = fit(config, Dataset.open(demo_dataset), Context(), hooks, log=lambda line: None)
    losses = [m["dev_loss"] for m in history]
    assert hooks.best == [loss == min(losses[:i + 1]) for i, loss in enumerate(losses)]
    best = torch.load(tmp_path / "best.pt", weights_only=True)["progress"]
    assert best["best"] == pytest.approx(min(losses)) and best["best_step"] == 2 * (losses.index(min(losses)) + 1)


class Killed(Exception):
    pass


def test_a_run_killed_mid_epoch_resumes_at_the_next_batch_of_the_same_order(demo_dataset, tmp_path, monkeypatch):
    """Checkpoints every 2 updates in epochs of 5; the process dies in update 5 of epoch 1 (its
    last checkpoint at update 4) and again in update 9: the batches trained, by their example
    indices, are those of an uninterrupted run, none repeated, none skipped, and so are the
    final weights."""
    from platform.training import loop

    config = tiny_config(max_epochs=2, max_steps_per_epoch=5, save_every=2, eval={"max_sentences": 5},
                         average_last=3, keep_best=1)
    dataset = Dataset.open(demo_dataset)
    real_step, seen = loop.train_step, []

    def recording(kill_at=None):
        def step(model, optimizer, scheduler, batches, *args):
            if kill_at is not None and len(seen) + 1 == kill_at:
                raise Killed
            seen.append(tuple(tuple(batch.indices.tolist()) for batch in batches))
            return real_step(model, optimizer, scheduler, batches, *args)
        return step

    monkeypatch.setattr(loop, "train_step", recording())
    fit(config, dataset, Context(), LocalHooks(tmp_path / "whole", config), log=lambda line: None)
    whole = list(seen)
    assert len(whole) == 10 and len(set(whole)) == 10

    seen.clear()
    interrupted = []
    for kill_at in (5, 9, None):  # killed in update 5 (resumes at 4), in update 9 (resumes at 8), then to the end
        monkeypatch.setattr(loop, "train_step", recording(kill_at))
        try:
            fit(config, dataset, Context(), LocalHooks(tmp_path / "killed", config), log=interrupted.append)
        except Killed:
            seen[:] = seen[:(len(seen) // 2) * 2]  # what the last checkpoint holds: updates since are lost
    assert seen == whole
    assert [line for line in interrupted if line.startswith("resumed")] == [
        "resumed from epoch 0 (update 4)", "resumed from epoch 1 (update 8)"]
    weights = [torch.load(tmp_path / run / "last.pt", weights_only=True)["model"] for run in ("whole", "killed")]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])
    # the kept weights: the last 3 checkpoints by update (epoch ends 5 and 10 among them) and the
    # best validation, the same files with the same weights as the uninterrupted run's
    last = [kept_files(tmp_path / run / LAST) for run in ("whole", "killed")]
    assert [path.name for path in last[0]] == ["update_00000006.pt", "update_00000008.pt", "update_00000010.pt"]
    best = [kept_files(tmp_path / run / BEST) for run in ("whole", "killed")]
    assert len(best[0]) == 1 and best[0][0].name.startswith(("update_00000005_", "update_00000010_"))
    for whole_file, killed_file in zip(last[0] + best[0], last[1] + best[1], strict=True):
        assert whole_file.name == killed_file.name
        kept = [kept_weights(whole_file), kept_weights(killed_file)]
        assert all(torch.equal(kept[0][name], kept[1][name]) for name in kept[0])
    final = kept_weights(last[0][-1])
    assert all(torch.equal(final[name], weights[0][name]) for name in final)  # update 10's are the last.pt's


def test_shared_embeddings_train_one_matrix_on_a_joint_vocabulary_and_are_refused_on_two(demo_dataset, tmp_path):
    """``model.share_all_embeddings`` (Vaswani et al. §3.4): on a dataset prepared with
    ``--joint-vocab`` the source embedding, the target embedding and the output layer stay one
    matrix through training, and the model has a V×D matrix fewer; on a dataset with a subword
    model per language it is refused in one line before any update."""
    from platform import prepare
    from platform.errors import ConfigError

    joint = tmp_path / "joint"
    assert prepare.main(["--data", "demo", "--demo-sizes", "300,20,20", "--vocab-size", "300", "--joint-vocab",
                         "--out", str(joint), "--quiet"]) == 0
    dataset = Dataset.open(joint)
    assert dataset.meta["vocab_size"]["src"] == dataset.meta["vocab_size"]["tgt"]
    config = tiny_config("transformer", max_epochs=1, max_steps_per_epoch=3, eval={"max_sentences": 5},
                         model={"share_all_embeddings": True})
    hooks = LocalHooks(tmp_path / "run", config)
    fit(config, dataset, Context(), hooks, log=lambda line: None)
    weights = torch.load(tmp_path / "run" / "last.pt", weights_only=True)["model"]
    assert torch.equal(weights["src_embed.tokens.weight"], weights["tgt_embed.tokens.weight"])
    assert torch.equal(weights["generator.weight"], weights["tgt_embed.tokens.weight"])
    with pytest.raises(ConfigError) as refused:
        fit(config, Dataset.open(demo_dataset), Context(), LocalHooks(tmp_path / "two", config), log=lambda line: None)
    assert str(refused.value) == ("model.share_all_embeddings: the dataset has a subword model per language; "
                                  "prepare it with --joint-vocab to share the embeddings")
    assert not (tmp_path / "two" / "last.pt").exists()
