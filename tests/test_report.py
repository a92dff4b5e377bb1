"""platform.report on a real MLflow store: two seeds of the baseline, a syntax model, a failed
run that reached the best dev BLEU before failing, test hypotheses from platform.evaluate --run,
and the paired bootstrap between the right two runs."""

import re

from mlflow.tracking import MlflowClient

from conftest import run_module
from platform import report
from platform.data.dataset import PreparedDataset as Dataset
from platform.tracking import runs
from platform.training.checkpoint import CHECKPOINT_FILE
from platform.training.config import load_train_config
from platform.training.context import Context
from platform.training.loop import LocalHooks, fit

SMALL = {"num_encoder_layers": 1, "num_decoder_layers": 1, "d_model": 32, "num_heads": 4, "d_ff": 64}


def trained_run(uri, dataset, tmp_path, model, seed, **knobs) -> str:
    """A real (tiny, in-process) training logged as a finished MLflow run with its best checkpoint."""
    config = load_train_config({"model": {"name": model, **SMALL, **knobs}, "max_epochs": 2, "max_steps_per_epoch": 20,
                                "eval": {"max_sentences": 20}, "batching": {"max_tokens": 600}, "seed": seed})
    directory = tmp_path / f"{model}-{seed}"
    hooks = LocalHooks(directory)
    fit(config, Dataset.open(dataset), Context(), hooks, log=lambda line: None)
    run_id = runs.start_run(uri, "report", f"{model}-seed{seed}", runs.run_params(config, {"model": model}),
                            {"model": model}, "")
    client = MlflowClient(uri)
    for metrics in hooks.reported:
        client.log_metric(run_id, "dev_bleu", metrics["dev_bleu"], step=int(metrics["epoch"]))
    best = directory / "best" / CHECKPOINT_FILE
    best.parent.mkdir()
    (directory / "best.pt").rename(best)
    client.log_artifact(run_id, str(best), "best")
    runs.end_run(uri, run_id)
    return run_id


def test_the_bootstrap_compares_the_best_finished_syntax_run_with_the_best_baseline(demo_dataset, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    baselines = [trained_run(uri, demo_dataset, tmp_path, "transformer", seed) for seed in (1, 2)]
    syntax = trained_run(uri, demo_dataset, tmp_path, "dbsa", 1, p_enc=1, p_dec=1)
    failed = runs.start_run(uri, "report", "crashed", {"model": "dbsa"}, {"model": "dbsa"}, "")
    MlflowClient(uri).log_metric(failed, "dev_bleu", 99.0, step=1)  # the best dev BLEU of all, then it failed
    runs.end_run(uri, failed, error="worker died")
    for run_id in [*baselines, syntax]:
        evaluated = run_module("platform.evaluate", "--run", run_id, "--tracking-uri", uri, "--test",
                               demo_dataset / "conllu" / "test", "--src", "sov", "--tgt", "svo", "--beam", "1",
                               "--out", tmp_path / "eval" / run_id / "test")
        assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert report.main(["--experiment", "report", "--out", str(tmp_path / "out"), "--tracking-uri", uri]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    client = MlflowClient(uri)
    test_bleu = {run_id: client.get_run(run_id).data.metrics["test_bleu"] for run_id in [*baselines, syntax]}
    dev_bleu = {run_id: max(m.value for m in client.get_metric_history(run_id, "dev_bleu")) for run_id in baselines}
    top = max(dev_bleu.values())
    tied = {client.get_run(run_id).info.run_name: run_id for run_id in baselines if dev_bleu[run_id] == top}
    found = re.search(r"paired bootstrap \(sacrebleu, 1000 resamples\): baseline (\S+) BLEU ([\d.]+) vs best (\S+) "
                      r"BLEU ([\d.]+) ± [\d.]+, p = ([\d.]+)", text)
    assert found, text[-1500:]
    assert found.group(1) in tied and found.group(3) == "dbsa-seed1"  # the best seed of the baseline (ties: either)
    assert abs(float(found.group(2)) - test_bleu[tied[found.group(1)]]) < 0.01  # the logged test BLEU, same hypotheses
    assert abs(float(found.group(4)) - test_bleu[syntax]) < 0.01
    assert 0.0 <= float(found.group(5)) <= 1.0
    import statistics  # the two baseline seeds as one setting: mean ± std of the best dev BLEU and the test BLEU

    seeds = text.split("## Over seeds", 1)[1].split("paired bootstrap", 1)[0]
    line = next(line for line in seeds.splitlines() if line.startswith("| transformer"))
    assert "| 1 2 |" in line and "dbsa" not in seeds  # one seed of dbsa: no row
    for values in (list(dev_bleu.values()), [test_bleu[run_id] for run_id in baselines]):
        assert f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}" in line
    rows = (tmp_path / "out" / "report.csv").read_text().splitlines()
    assert len(rows) == 5 and sum(",failed," in row for row in rows) == 1  # the failed run is listed, not chosen
