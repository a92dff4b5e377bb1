"""The papers' comparisons on real Japanese–English data, run with the platform itself.

    python benchmarks/study.py --tanaka ../shared/data/tanaka-enja --epochs 2 --seeds 1
    python benchmarks/study.py --table-only          # rebuild docs/results_table.md from MLflow

Every row is a paper recipe (``platform/training/recipes.py``, e.g. ``deguchi2019/enc+dec``: that table
row's own settings) trained by ``platform.train`` (Ray Train, one worker) at one size with
the same budget (epochs over the same data, the same token batch and optimiser), evaluated on
the test set with ``platform.evaluate --run`` (decoding as the recipe says), all in the MLflow experiment
``tanaka-study`` (tags ``study_row``, ``seed``).  Finished (row, seed) pairs are skipped, so an
interrupted study continues where it stopped.  The table (test BLEU ± std over seeds,
tokenized BLEU, chrF, UAS of the DBSA heads, parameters, training tokens/s and the paired
bootstrap p-value of each row against its paper's baseline) goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository's platform package, not the standard library's

# every row is a paper recipe (platform/training/recipes.py: the row's own settings); paper → (baseline, rows).
# Deguchi's and Omote's Transformer baselines are the same config, so it runs once for both.
TABLES: dict[str, tuple[str, list[str]]] = {
    "Deguchi et al. 2019, Table 2 (dependency-based self-attention)":
        ("deguchi2019/baseline", ["deguchi2019/baseline", "deguchi2019/enc", "deguchi2019/dec",
                                  "deguchi2019/enc+dec"]),
    "Omote et al. 2019, Table 2 (dependency-based relative positions)":
        ("deguchi2019/baseline", ["deguchi2019/baseline", "omote2019/rel", "omote2019/dep", "omote2019/dep+rel"]),
    "Yang et al. 2017, Tables 3-4 (bidirectional hierarchical tree-GRU)":
        ("yang2017/seq2seq", ["yang2017/seq2seq", "yang2017/tree2seq", "yang2017/beta0", "yang2017/beta05",
                              "yang2017/gated"]),
    "Currey & Heafield 2018, Table 2 (unsupervised Gumbel tree-LSTM)":
        ("currey2018/seq2seq", ["currey2018/seq2seq", "currey2018/bottom-up", "currey2018/top-down"]),
}
# Vaswani et al. 2017 (§6.1) evaluate the Transformer on the average of its last 5 checkpoints;
# the Transformer-based rows (Deguchi's and Omote's, built on that recipe) are also scored so
# (``test_avgN_*``, N = min(5, epochs), shown beside the best checkpoint's score).  The RNN papers
# (Yang, Currey & Heafield) evaluate single checkpoints.  Our checkpoints are per epoch.
AVERAGED_PAPERS = ("deguchi2019", "omote2019")
AVERAGE_LAST = 5
ROWS: list[str] = list(dict.fromkeys(row for _, rows in TABLES.values() for row in rows))
# the shared budget: one size ("sweep": 2+2 layers d 128 / RNN 128), the same batches and epochs;
# each row trains and decodes as its recipe says (optimiser, schedule, clipping, beam)
BUDGET = {"max_steps_per_epoch": None, "patience": None, "batching.max_tokens": 3000, "eval.max_sentences": 200}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tanaka", default=str(Path(os.environ.get("NMT_TEST_DATA") or ROOT.parent / "shared" / "data")
                                                  / "tanaka-enja"),
                        help="the tanaka-enja directory (CoNLL-U pairs)")
    parser.add_argument("--dataset", default=str(ROOT / "data" / "tanaka-ja-en"),
                        help="prepared dataset (made if missing)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=1, help="seeds per row (1, 2, ...)")
    parser.add_argument("--rows", nargs="*", default=ROWS, help="rows (recipe names) to run (default all)")
    parser.add_argument("--experiment", default="tanaka-study")
    parser.add_argument("--tracking-uri", default=f"sqlite:///{ROOT / 'mlflow.db'}")
    parser.add_argument("--storage-path", default=str(ROOT / "runs"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "results_table.md"))
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, help="1 to train each row on a GPU")
    parser.add_argument("--max-steps", type=int, help="cap the steps of an epoch (quick checks only)")
    parser.add_argument("--table-only", action="store_true", help="only rebuild the table from MLflow")
    return parser


def prepare(args) -> str:
    """The prepared Tanaka dataset (``--dataset``: a directory or a URI such as s3://...), made
    once if it is not there (through the dataset I/O layer, like ``platform.prepare --out``)."""
    from platform.data import dataset as ds
    from platform.data.builtin import resolve_dataset

    if ds.is_prepared(args.dataset):
        return resolve_dataset(args.dataset)
    from platform.data.encode import PrepareConfig, prepare

    tanaka = Path(args.tanaka)
    # a URI that holds something else (an unfinished upload, an older format) is replaced
    return ds.write_dataset(args.dataset, lambda out: prepare(
        PrepareConfig(src_lang="ja", tgt_lang="en"), {split: tanaka / split for split in ("train", "dev", "test")},
        Path(out), progress=False), overwrite=True)


def finished_runs(client, experiment: str) -> list:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return client.search_runs([found.experiment_id], filter_string="attributes.status = 'FINISHED'", max_results=5000)


def run_row(row: str, seed: int, args, dataset: str) -> None:
    from platform.data.dataset import DatasetRef
    from platform.inference import Trained, write_outputs
    from platform.launch.driver import Job, run
    from platform.tracking.run_files import log_test_results
    from platform.training.config import resolve_config
    from platform.training.recipes import get_recipe

    settings = {**BUDGET, "seed": seed}
    if args.max_steps:
        settings["max_steps_per_epoch"] = args.max_steps
    config = resolve_config(get_recipe(row).model, "sweep", recipe=row, max_epochs=args.epochs,
                            overrides=[f"{k}={json.dumps(v)}" for k, v in settings.items()])
    slug = row.replace("/", "-").replace("+", "-")
    job = Job(dataset=DatasetRef(name=dataset, location=dataset), workers=1, gpus_per_worker=args.gpus_per_worker,
              cpus_per_worker=2.0, experiment=args.experiment, tracking_uri=args.tracking_uri,
              run_name=f"{slug}-s{seed}-{int(time.time())}", storage_path=args.storage_path, max_failures=1)
    started = time.time()
    run_id = run(config, job, tags={"study_row": row, "recipe": row, "seed": str(seed)})
    tanaka = Path(args.tanaka)
    device = "cuda" if args.gpus_per_worker else "cpu"
    trained = Trained.load(run_id=run_id, tracking_uri=args.tracking_uri, device=device)
    result, references = trained.score(str(tanaka / "test"), device=device)  # each recipe's own decoding
    with tempfile.TemporaryDirectory() as scratch:
        files = write_outputs(Path(scratch) / "test", result.hypotheses, references, trained.tgt_lang)
        log_test_results(args.tracking_uri, run_id, result, files, "test")
    window = averaged_window(row, args.epochs)
    if window:  # the paper's own evaluation: the last epochs' weights averaged
        kind = f"test_avg{window}"
        averaged = Trained.load(run_id=run_id, tracking_uri=args.tracking_uri, device=device, average_last=window)
        result, references = averaged.score(str(tanaka / "test"), device=device, metric_prefix=kind)
        with tempfile.TemporaryDirectory() as scratch:
            files = write_outputs(Path(scratch) / kind, result.hypotheses, references, averaged.tgt_lang)
            log_test_results(args.tracking_uri, run_id, result, files, "test", kind=kind)
    sys.stderr.write(f"[study] {row} seed {seed}: run {run_id} in {time.time() - started:.0f} s\n")


def averaged_window(row: str, epochs: int) -> int | None:
    """How many epochs' weights a row's test score averages (None: the best checkpoint only)."""
    if row.split("/")[0] not in AVERAGED_PAPERS or epochs < 2:
        return None
    return min(AVERAGE_LAST, epochs)


def hypotheses(client, run_id: str, directory: Path) -> dict[str, list[str]]:
    tests = [a.path for a in client.list_artifacts(run_id, "test")]
    local = Path(client.download_artifacts(run_id, tests[0], str(directory / run_id)))
    return {p.name.split(".", 1)[1]: p.read_text(encoding="utf-8").splitlines() for p in local.iterdir()}


def p_value(client, run_id: str, baseline_id: str, directory: Path) -> float | None:
    """Paired bootstrap (sacrebleu, 1000 resamples) of a run against the baseline run of the same seed."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if run_id == baseline_id:
        return None
    mine, base = hypotheses(client, run_id, directory), hypotheses(client, baseline_id, directory)
    test = PairedTest([("baseline", base["hyp"]), ("system", mine["hyp"])], metrics={"BLEU": BLEU()},
                      references=[base["ref"]], test_type="bs", n_samples=1000)
    _, scores = test()
    return float(scores["BLEU"][1].p_value)


def mean_std(values: list[float], scale: float = 1.0) -> str:
    if not values:
        return "–"
    values = [v * scale for v in values]
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def table(args) -> str:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(args.tracking_uri)
    runs = [r for r in finished_runs(client, args.experiment) if "test_bleu" in r.data.metrics]
    by_row: dict[str, dict[str, Any]] = {}
    for run in sorted(runs, key=lambda r: r.info.start_time):
        by_row.setdefault(run.data.tags["study_row"], {})[run.data.tags["seed"]] = run  # the latest per seed
    lines = []
    with tempfile.TemporaryDirectory() as scratch:
        for paper, (baseline, rows) in TABLES.items():
            lines += [f"### {paper}", "",
                      "| row | seeds | test BLEU | BLEU, last epochs averaged | BLEU (tok) | chrF | "
                      "UAS enc/dec | params | train tok/s | p vs " + baseline + " |",
                      "|---|---|---|---|---|---|---|---|---|---|"]
            for row in rows:
                seeds = by_row.get(row, {})
                if not seeds:
                    lines.append(f"| {row} | 0 | (not run) | | | | | | | |")
                    continue

                def metric(key: str, seeds: dict[str, Any] = seeds) -> list[float]:
                    return [r.data.metrics[key] for r in seeds.values() if key in r.data.metrics]

                uas = "/".join(f"{statistics.mean(metric(k)):.3f}"
                               for k in ("test_uas_enc", "test_uas_dec") if metric(k)) or "–"
                params = metric("num_parameters")
                pvalues = [p_value(client, run.info.run_id, by_row[baseline][seed].info.run_id, Path(scratch))
                           for seed, run in seeds.items() if seed in by_row.get(baseline, {})]
                pvalues = [p for p in pvalues if p is not None]
                averaged = next((key for run in seeds.values() for key in sorted(run.data.metrics)
                                 if key.startswith("test_avg") and key.endswith("_bleu")), None)
                shown = f"{mean_std(metric(averaged))} ({averaged.split('_')[1][3:]})" if averaged else "–"
                lines.append(f"| {row} | {len(seeds)} | {mean_std(metric('test_bleu'))} | {shown} | "
                             f"{mean_std(metric('test_bleu_tok'))} | {mean_std(metric('test_chrf'))} | {uas} | "
                             f"{int(params[0]):,} | {statistics.mean(metric('tokens_per_s')):,.0f} | "
                             f"{', '.join(f'{p:.3f}' for p in pvalues) if pvalues else '–'} |")
            lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    unknown = [row for row in args.rows if row not in ROWS]
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; rows: {list(ROWS)}")
    if not args.table_only:
        from mlflow.tracking import MlflowClient

        dataset = prepare(args)
        done = {(r.data.tags.get("study_row"), r.data.tags.get("seed"))
                for r in finished_runs(MlflowClient(args.tracking_uri), args.experiment)
                if "test_bleu" in r.data.metrics}
        for seed in range(1, args.seeds + 1):
            for row in args.rows:
                if (row, str(seed)) not in done:
                    run_row(row, seed, args, dataset)
    text = table(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
