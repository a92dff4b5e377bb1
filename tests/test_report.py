"""platform.report on a real MLflow store: two seeds of the baseline, a syntax model, a failed
run that reached the best dev BLEU before failing, test hypotheses from platform.evaluate --run,
and the significance tests (bootstrap and approximate randomisation, BLEU and chrF) of every
other model's best run against the best baseline, in one call."""


from mlflow.tracking import MlflowClient

from platform import report
from platform.data.dataset import PreparedDataset as Dataset
from platform.tracking import runs
from platform.training.checkpoint import CHECKPOINT_FILE
from platform.training.config import load_train_config
from platform.training.context import Context
from platform.training.hooks import LocalHooks
from platform.training.loop import fit

SMALL = {"num_encoder_layers": 1, "num_decoder_layers": 1, "d_model": 32, "num_heads": 4, "d_ff": 64}


def trained_run(uri, dataset, tmp_path, model, seed, **knobs) -> str:
    """A real (tiny, in-process) training logged as a finished MLflow run with its best checkpoint."""
    config = load_train_config({"model": {"name": model, **SMALL, **knobs}, "max_epochs": 2, "max_steps_per_epoch": 20,
                                "eval": {"max_sentences": 20}, "batching": {"max_tokens": 600}, "seed": seed})
    directory = tmp_path / f"{model}-{seed}"
    hooks = LocalHooks(directory, config)
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


def test_every_model_is_tested_against_the_best_finished_baseline(demo_dataset, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    baselines = [trained_run(uri, demo_dataset, tmp_path, "transformer", seed) for seed in (1, 2)]
    syntax = trained_run(uri, demo_dataset, tmp_path, "dbsa", 1, p_enc=1, p_dec=1)
    relative = trained_run(uri, demo_dataset, tmp_path, "transformer_rel", 1, use_rel=True)
    failed = runs.start_run(uri, "report", "crashed", {"model": "dbsa"}, {"model": "dbsa"}, "")
    MlflowClient(uri).log_metric(failed, "dev_bleu", 99.0, step=1)  # the best dev BLEU of all, then it failed
    runs.end_run(uri, failed, error="worker died")
    from platform import evaluate  # its main in this process: the CLI as a process is tests/test_inference.py's

    for run_id in [*baselines, syntax, relative]:
        assert evaluate.main(["--run", run_id, "--tracking-uri", uri, "--test", str(demo_dataset / "conllu" / "test"),
                              "--src", "sov", "--tgt", "svo", "--beam", "1",
                              "--out", str(tmp_path / "eval" / run_id / "test")]) == 0
    assert report.main(["--experiment", "report", "--out", str(tmp_path / "out"), "--tracking-uri", uri]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    client = MlflowClient(uri)
    test_bleu = {run_id: client.get_run(run_id).data.metrics["test_bleu"] for run_id in [*baselines, syntax, relative]}
    dev_bleu = {run_id: max(m.value for m in client.get_metric_history(run_id, "dev_bleu")) for run_id in baselines}
    top = max(dev_bleu.values())
    tied = {client.get_run(run_id).info.run_name: run_id for run_id in baselines if dev_bleu[run_id] == top}
    section = text.split("## Significance", 1)[1]
    assert "paired bootstrap, 1000 resamples" in section and "approximate randomisation, 10000 trials" in section
    table = {line.split("|")[2].strip(): [cell.strip() for cell in line.split("|")[1:-1]]
             for line in section.splitlines() if line.startswith("| ") and not line.startswith("| model")}
    header_line = next(line for line in section.splitlines() if line.startswith("| model"))
    header = [cell.strip() for cell in header_line.split("|")[1:-1]]
    assert header == ["model", "run", "BLEU", "BLEU bootstrap", "BLEU p (bs)", "BLEU p (ar)",
                      "chrF2", "chrF2 bootstrap", "chrF2 p (bs)", "chrF2 p (ar)"]
    # the baseline is the best seed of the transformer (ties: either), first; each other model once, with its best run
    baseline_name = next(iter(table))
    assert baseline_name in tied and table[baseline_name][0] == "transformer" and table[baseline_name][4] == "–"
    assert set(table) == {baseline_name, "dbsa-seed1", "transformer_rel-seed1"}  # never the failed run
    compared = ((baseline_name, tied.get(baseline_name)), ("dbsa-seed1", syntax), ("transformer_rel-seed1", relative))
    for name, run_id in compared:
        cells = dict(zip(header, table[name]))
        assert abs(float(cells["BLEU"]) - test_bleu[run_id]) < 0.01  # the logged test BLEU: same hypotheses, tokenizer
        assert abs(float(cells["chrF2"]) - client.get_run(run_id).data.metrics["test_chrf"]) < 0.01
        if name != baseline_name:
            p_values = ("BLEU p (bs)", "BLEU p (ar)", "chrF2 p (bs)", "chrF2 p (ar)")
            assert all(0.0 <= float(cells[key]) <= 1.0 for key in p_values)
    import statistics  # the two baseline seeds as one setting: mean ± std of the best dev BLEU and the test BLEU

    seeds = text.split("## Over seeds", 1)[1].split("## Significance", 1)[0]
    line = next(line for line in seeds.splitlines() if line.startswith("| transformer"))
    assert "| 1 2 |" in line and "dbsa" not in seeds  # one seed of dbsa: no row
    for values in (list(dev_bleu.values()), [test_bleu[run_id] for run_id in baselines]):
        assert f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}" in line
    rows = (tmp_path / "out" / "report.csv").read_text().splitlines()
    assert len(rows) == 6 and sum(",failed," in row for row in rows) == 1  # the failed run is listed, not chosen


def test_the_significance_table_and_its_caption_come_from_the_same_settings(monkeypatch):
    """report and --confirm (one seed pair at a time) share one table: seeded tests whose
    resamples, trials and seed are the ones its caption states."""
    from platform.tracking import significance

    monkeypatch.setattr(significance, "BOOTSTRAP_SAMPLES", 40)
    monkeypatch.setattr(significance, "RANDOMISATION_TRIALS", 30)
    references = ["the cat sat on the mat", "a dog runs fast", "birds fly high", "it rains today"] * 4
    baseline = ["the cat sat on a mat", "a dog runs", "birds fly", "it rains"] * 4
    better = ["the cat sat on the mat", "the dog runs fast", "birds fly high", "it rains today"] * 4

    def table():
        return significance.significance_table([{"system": "baseline"}, {"system": "better"}], [baseline, better],
                                               references, "13a")

    first = table()
    assert list(first[0]) == ["system", "BLEU", "BLEU bootstrap", "BLEU p (bs)", "BLEU p (ar)",
                              "chrF2", "chrF2 bootstrap", "chrF2 p (bs)", "chrF2 p (ar)"]
    assert first[0]["BLEU p (bs)"] == "–" and 0.0 <= float(first[1]["BLEU p (ar)"]) <= 1.0
    assert table() == first  # seeded
    monkeypatch.setattr(significance, "SEED", 7)
    assert table() != first  # the stated seed is the one the tests draw with
    caption = significance.methods("13a")
    assert "40 resamples" in caption and "30 trials" in caption and "seed 7" in caption and "tokenize=13a" in caption
