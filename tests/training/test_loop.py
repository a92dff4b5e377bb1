"""The epoch loop (``fit``): epochs, metrics, resuming, early stopping."""

from helpers import tiny_config
from platform.data.dataset import PreparedDataset as Dataset
from platform.training.context import Context
from platform.training.loop import LocalHooks, fit


class FinalHooks(LocalHooks):
    """LocalHooks that also keep each report's ``final`` flag."""

    def __init__(self, directory):
        super().__init__(directory)
        self.finals = []

    def report(self, metrics, state, evaluation, is_best, final=False):
        self.finals.append(final)
        super().report(metrics, state, evaluation, is_best, final)


def test_fit_runs_epochs_reports_metrics_and_resumes(demo_dataset, tmp_path):
    config = tiny_config(max_epochs=2, max_steps_per_epoch=3, eval={"max_sentences": 20})
    dataset = Dataset.open(demo_dataset)
    hooks = FinalHooks(tmp_path)
    lines = []
    history = fit(config, dataset, Context(), hooks, log=lines.append)
    assert [int(m["epoch"]) for m in history] == [1, 2]
    assert hooks.finals == [False, True]  # the end-of-run work goes before the last report (RayHooks)
    for key in ("train_loss", "dev_loss", "dev_bleu", "dev_chrf", "dev_bleu_tok", "dev_uas_enc", "dev_uas_dec", "tokens_per_s"):
        assert key in history[-1]
    assert lines[0].startswith("epoch 1/2  train_loss")
    assert (tmp_path / "last.pt").exists() and (tmp_path / "best.pt").exists()
    longer = tiny_config(max_epochs=3, max_steps_per_epoch=3, eval={"max_sentences": 20})
    resumed = fit(longer, dataset, Context(), LocalHooks(tmp_path), log=lines.append)
    assert [int(m["epoch"]) for m in resumed] == [1, 2, 3]  # epochs 1-2 restored, 3 trained
    assert any(line.startswith("resumed from epoch 2") for line in lines)


def test_early_stopping_stops_when_dev_bleu_does_not_improve(demo_dataset, tmp_path):
    config = tiny_config(max_epochs=6, max_steps_per_epoch=1, patience=1, eval={"max_sentences": 5},
                         optim={"lr": 1e-9, "warmup_steps": 0})
    hooks = FinalHooks(tmp_path)
    history = fit(config, Dataset.open(demo_dataset), Context(), hooks, log=lambda line: None)
    assert len(history) < 6
    assert hooks.finals == [False] * (len(history) - 1) + [True]  # early stopping's last epoch is final too


def test_an_update_accumulates_update_freq_batches(demo_dataset, tmp_path):
    """``global_tokens`` 1200 with batches of ≤ 600 on one worker: 2 batches per update, and
    an update sees about twice a batch's tokens (logged as ``tokens_per_update``)."""
    dataset = Dataset.open(demo_dataset)
    single = fit(tiny_config(max_epochs=1, max_steps_per_epoch=4, eval={"max_sentences": 5}), dataset, Context(),
                 LocalHooks(tmp_path / "single"), log=lambda line: None)[-1]
    config = tiny_config(batching={"global_tokens": 1200}, max_epochs=1, max_steps_per_epoch=4,
                         eval={"max_sentences": 5})
    accumulated = fit(config, dataset, Context(), LocalHooks(tmp_path / "accumulated"), log=lambda line: None)[-1]
    assert single["update_freq"] == 1 and accumulated["update_freq"] == 2
    assert accumulated["step"] == single["step"] == 4  # max_steps_per_epoch counts updates
    assert 1.6 * single["tokens_per_update"] < accumulated["tokens_per_update"] <= 1200
