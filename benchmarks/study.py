"""The papers' comparisons on real Japanese–English data, run with the platform itself.

    python -m benchmarks.study                       # the study: 3 rows x 3 seeds at the cpu size
    python -m benchmarks.study --table-only          # rebuild the tables in docs/results.md from MLflow

Every row is a paper recipe (``platform/training/recipes.py``, e.g. ``deguchi2019/enc+dec``: that
table row's own settings) trained by the platform's driver (Ray Train, one worker, as
``platform.train`` runs it) at one size and one budget in updates (the same batches and
learning-rate schedule for every row), its best checkpoint decoded on the test set with its
recipe's decoding as ``platform.evaluate --run`` does, all in the MLflow experiment
``tanaka-study`` (tags ``study_row``, ``seed``).  Finished (row, seed) pairs are skipped, so an
interrupted study continues where it stopped.

The tables (written between the ``STUDY_BEGIN``/``STUDY_END`` markers of ``--out``, nothing else
of that file touched): per row, test BLEU and chrF mean ± std over the seeds, the seed-level test
against the paper's baseline, the paired tests against it seed pair by seed pair (seed s against
the baseline's seed s; ``platform.tracking.significance``, as a sweep's confirmation stage
tests), the weights of the last validations averaged, the DBSA heads' UAS, parameters, training
tokens/s and the wall time per run; then dev BLEU by update (mean over seeds) and the same curves as a figure.

A sweep (``platform.tune --space papers`` with a grid over the recipes and ``--confirm``) would
give the same tests, but it trains every row once more in its search stage before the confirmation
retrains it: 12 runs for the 9 that the table uses.  Here each run is one the table reads.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# every row is a paper recipe (platform/training/recipes.py: the row's own settings); baseline → (title, rows).
# Deguchi's and Omote's Transformer baselines are the same config, so it runs once for both.
TABLES: dict[str, tuple[str, list[str]]] = {
    "deguchi2019/baseline": ("Deguchi et al. 2019, Table 2 (dependency-based self-attention)",
                             ["deguchi2019/baseline", "deguchi2019/enc", "deguchi2019/dec", "deguchi2019/enc+dec"]),
    "omote2019/baseline": ("Omote et al. 2019, Table 2 (dependency-based relative positions)",
                           ["omote2019/baseline", "omote2019/rel", "omote2019/dep", "omote2019/dep+rel"]),
    "yang2017/seq2seq": ("Yang et al. 2017, Tables 3-4 (bidirectional hierarchical tree-GRU)",
                         ["yang2017/seq2seq", "yang2017/tree2seq", "yang2017/bileaf", "yang2017/beta0",
                          "yang2017/beta05", "yang2017/beta1", "yang2017/gated"]),
    "currey2018/seq2seq": ("Currey & Heafield 2018, Table 2 (unsupervised Gumbel tree-LSTM)",
                           ["currey2018/seq2seq", "currey2018/bottom-up", "currey2018/top-down"]),
}
# rows that are another row's runs decoded as their own recipe decodes, where the two train
# identically (``decoded_as``): Omote's Transformer baseline is Deguchi's, decoded greedily as
# Omote decode (§5.1), so each Omote row is tested against a baseline decoded the same way
DECODED_AS = {"omote2019/baseline": "deguchi2019/baseline"}
# tables shown a second time with every row decoded as another recipe decodes (by the table's
# baseline → that recipe): Omote et al. decode greedily (§5.1), Deguchi et al. with beam 4 and
# α 0.6 (§4.2), so Omote's rows are also scored that way, against the baseline decoded alike
REDECODED = {"omote2019/baseline": "deguchi2019/baseline"}
# a paper's comparisons besides each row against its table's baseline (the table's baseline →
# [(row, against)]), each in its table's Holm family:
# - Deguchi et al. (§4.3): "using either the encoder-side dependency-based self-attention or the
#   decoder-side dependency-based self-attention improves translation performance, and using them
#   in combination achieves further improvements";
# - Omote et al.'s Transformer_dep+rel "improved by 1.31 BLEU points against Transformer_abs and by
#   0.50 BLEU points against Transformer_rel" (§5.2);
# - Yang et al. (§5): the full model "yields significant improvements over both the sequential and
#   the tree-based models", "the model with bidirectional leaf-node encoding shows better
#   performance" than the tree-based encoder, and the gating scalar improves on Table 4's fixed
#   weightings (each against GS: β = 0, 0.5, 1).
# Currey and Heafield compare each unsupervised tree encoder with seq2seq only (§5).
ALSO_COMPARED = {
    "deguchi2019/baseline": [("deguchi2019/enc+dec", "deguchi2019/enc"), ("deguchi2019/enc+dec", "deguchi2019/dec")],
    "omote2019/baseline": [("omote2019/dep+rel", "omote2019/rel")],
    "yang2017/seq2seq": [("yang2017/gated", "yang2017/tree2seq"), ("yang2017/bileaf", "yang2017/tree2seq"),
                         ("yang2017/gated", "yang2017/beta0"), ("yang2017/gated", "yang2017/beta05"),
                         ("yang2017/gated", "yang2017/beta1")],
}
ROWS: list[str] = [row for _, rows in TABLES.values() for row in rows]
STUDY_ROWS = ["deguchi2019/baseline", "deguchi2019/enc+dec", "omote2019/dep+rel"]
# Vaswani et al. 2017 (§6.1) evaluate the Transformer on the average of its last 5 checkpoints;
# the Transformer-based rows (Deguchi's and Omote's, built on that recipe) are also scored so
# (``test_avgN_*``, N = min(5, validations)).  The RNN papers evaluate single checkpoints.
AVERAGED_PAPERS = ("deguchi2019", "omote2019")
AVERAGE_LAST = 5
# the shared budget: one size, the same token batches, a validation (dev BLEU on all 500 dev
# sentences, a checkpoint) every EPOCH_UPDATES updates, MAX_UPDATES in all; each row's own
# optimiser, clipping, label smoothing and decoding from its recipe
MAX_UPDATES = 2000
EPOCH_UPDATES = 250
BUDGET = {"eval.max_sentences": None, "average_last": AVERAGE_LAST}
# a run has converged when its dev BLEU gained nothing over its last PATIENCE validations (the
# tables' "converged" column; JoeyNMT's and fairseq's early stopping count validations so)
PATIENCE = 3
BEGIN, END = "<!-- STUDY_BEGIN: written by benchmarks/study.py -->", "<!-- STUDY_END -->"


TANAKA = Path(os.environ.get("NMT_TEST_DATA") or ROOT.parent / "shared" / "data") / "tanaka-enja"


UNSEEN = "test BLEU, unseen"  # the column: without the test pairs whose reference is a training target
TOKENIZED = "test BLEU, tokenized"  # BLEU of the tokenized text, as the papers report theirs (multi-bleu)


def training_targets(tanaka: Path, lang: str = "en") -> frozenset[str]:
    """The training split's ``lang`` sentences, detokenized as the runs' test references are
    (``platform.training.metrics.detokenizer``): 60 of Tanaka's 500 English test references are
    among them, verbatim.  A model may have memorised those, so the tables also score the test
    set without them; empty where ``tanaka`` has no training split."""
    import gzip

    from platform.training.metrics import detokenizer

    path = tanaka / f"train.{lang}.conllu.gz"
    if not path.exists():
        return frozenset()
    detokenize = detokenizer(lang)
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return frozenset(detokenize(line[len("# text = "):].rstrip("\n")) for line in handle
                         if line.startswith("# text = "))


def unseen_bleu(outputs: dict[str, list[str]], seen: frozenset[str], tokenizer: str) -> float:
    """Test BLEU (sacrebleu, ``tokenizer``, detokenized) of one run without the pairs whose
    reference is in ``seen``."""
    import sacrebleu

    kept = [i for i, reference in enumerate(outputs["ref"]) if reference not in seen]
    return sacrebleu.corpus_bleu([outputs["hyp"][i] for i in kept], [[outputs["ref"][i] for i in kept]],
                                 tokenize=tokenizer).score


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tanaka", default=str(TANAKA),
                        help="the tanaka-enja directory (CoNLL-U pairs)")
    parser.add_argument("--dataset", default=str(ROOT / "data" / "tanaka-ja-en"),
                        help="prepared dataset (made if missing)")
    parser.add_argument("--size", choices=("cpu", "paper"), default="cpu", help="model size (default cpu)")
    parser.add_argument("--max-updates", type=int, default=MAX_UPDATES, help="the budget of every row, in updates")
    parser.add_argument("--epoch-updates", type=int, default=EPOCH_UPDATES,
                        help="updates between validations (dev BLEU, a checkpoint): the study's epochs")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per row (1, 2, ...)")
    parser.add_argument("--patience", type=int, default=None,
                        help="stop a run after this many validations without a better dev BLEU (a converged "
                             "budget, --max-updates its cap; default: none, every run trains --max-updates)")
    parser.add_argument("--rows", nargs="*", default=STUDY_ROWS,
                        help=f"rows (recipe names) to run (default {' '.join(STUDY_ROWS)})")
    parser.add_argument("--experiment", default="tanaka-study")
    parser.add_argument("--tracking-uri", default=f"sqlite:///{ROOT / 'study' / 'mlflow.db'}")
    parser.add_argument("--storage-path", default=str(ROOT / "study" / "runs"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "results.md"),
                        help="the markdown file whose generated section gets the tables (made if missing)")
    parser.add_argument("--figure", default=str(ROOT / "docs" / "img" / "study_dev_bleu.png"),
                        help="the dev curves' figure")
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, help="1 to train each row on a GPU")
    parser.add_argument("--table-only", action="store_true", help="only rebuild the tables from MLflow")
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


def decoded_as(args) -> dict[str, str]:
    """``DECODED_AS`` where the two rows train identically at ``--size`` and this budget: every
    setting equal except decoding and those one recipe leaves unset (the DBSA knobs of the
    Transformer).  At ``--size paper`` the papers' batches differ, and each baseline trains."""
    from platform.tracking.runs import run_params

    shared = {}
    for row, source in DECODED_AS.items():
        mine, theirs = (run_params(row_config(name, 1, args), {}) for name in (row, source))
        differ = [key for key in mine.keys() | theirs.keys() if not key.startswith("decode.")
                  and "None" not in (mine.get(key, "None"), theirs.get(key, "None")) and mine[key] != theirs[key]]
        if not differ:
            shared[row] = source
    return shared


def trained_rows(args) -> list[str]:
    return [row for row in ROWS if row not in decoded_as(args)]


def row_config(row: str, seed: int, args):
    """The TrainConfig of one (row, seed): the recipe at ``--size``, the study's budget."""
    from platform.training.config import resolve_config
    from platform.training.recipes import get_recipe

    settings = {**BUDGET, "seed": seed, "max_steps_per_epoch": args.epoch_updates,
                "patience": getattr(args, "patience", None)}
    return resolve_config(get_recipe(row).model, args.size, recipe=row, max_updates=args.max_updates,
                          overrides=[f"{k}={json.dumps(v)}" for k, v in settings.items()])


def run_row(row: str, seed: int, args, dataset: str) -> str:
    """Train one (row, seed); returns the run id."""
    from platform.data.dataset import DatasetRef, read_meta
    from platform.launch.driver import Job, run
    from platform.tracking.logger import RunLogger

    job = Job(dataset=DatasetRef(name=dataset, location=dataset, meta=read_meta(dataset)), workers=1,
              gpus_per_worker=args.gpus_per_worker,
              cpus_per_worker=2.0, experiment=args.experiment, tracking_uri=args.tracking_uri,
              run_name=f"{slug(row)}-s{seed}-{int(time.time())}", storage_path=args.storage_path, max_failures=1)
    started = time.time()
    run_id = run(row_config(row, seed, args), job, tags={"study_row": row, "recipe": row, "seed": str(seed)})
    RunLogger(args.tracking_uri, run_id, reopen=False).metrics({"study_wall_s": time.time() - started}, step=0)
    return run_id


def slug(row: str) -> str:
    return row.replace("/", "-").replace("+", "-")


def test_kinds(row: str, validations: int, shared: dict[str, str]) -> dict[str, str | None]:
    """How a run of ``row`` is scored on test: ``{kind: the recipe whose decoding}`` (kind
    ``test``: the best checkpoint, the row's own decoding; ``test_avgN``: the last N validations'
    weights averaged; ``test_as_<row>``: decoded as a row of ``shared`` decodes)."""
    kinds: dict[str, str | None] = {"test": None}
    window = averaged_window(row, validations)
    if window:
        kinds[f"test_avg{window}"] = None
    kinds.update({f"test_as_{slug(other)}": other for other, source in shared.items() if source == row})
    kinds.update({f"test_as_{slug(decoder)}": decoder for baseline, decoder in REDECODED.items()
                  if row in TABLES[baseline][1] and row != decoder})
    return kinds


def complete(run, args, device: str, shared: dict[str, str]) -> None:
    """Score a finished run on test in every way its row needs and it lacks (``test_kinds``), and
    add that time to its ``study_wall_s``."""
    from mlflow.tracking import MlflowClient

    from platform.tracking.logger import RunLogger

    validations = len(MlflowClient(args.tracking_uri).get_metric_history(run.info.run_id, "dev_bleu"))
    started = time.time()
    for kind, decoding in test_kinds(run.data.tags["study_row"], validations, shared).items():
        if f"{kind}_bleu" not in run.data.metrics:
            score_on_test(run.info.run_id, kind, decoding, args, device)
    spent = time.time() - started
    if spent > 1:
        wall = run.data.metrics.get("study_wall_s", 0.0) + spent
        RunLogger(args.tracking_uri, run.info.run_id, reopen=False).metrics({"study_wall_s": wall}, step=0)
    sys.stderr.write(f"[study] {run.data.tags['study_row']} seed {run.data.tags['seed']}: run {run.info.run_id} "
                     f"scored ({spent:.0f} s)\n")


def score_on_test(run_id: str, kind: str, decoded_as: str | None, args, device: str) -> None:
    """Decode the test set with the run's best (or, for ``test_avgN``, last N averaged) weights,
    as its recipe (or ``decoded_as``'s) decodes, and log the scores and files onto the run under
    ``kind``, as ``platform.evaluate --run`` does."""
    from platform.inference import Trained, write_outputs
    from platform.tracking.run_files import log_test_results
    from platform.training.recipes import get_recipe

    average = int(kind[len("test_avg"):]) if kind.startswith("test_avg") else None
    trained = Trained.load(run_id=run_id, tracking_uri=args.tracking_uri, device=device, average_last=average)
    decode = get_recipe(decoded_as).training if decoded_as else {}
    result, references = trained.score(str(Path(args.tanaka) / "test"), beam=decode.get("decode.beam"),
                                       alpha=decode.get("decode.alpha"), device=device, metric_prefix=kind)
    with tempfile.TemporaryDirectory() as scratch:
        files = write_outputs(Path(scratch) / kind, result.hypotheses, references, trained.tgt_lang)
        log_test_results(args.tracking_uri, run_id, result, files, "test", kind=kind)


def averaged_window(row: str, validations: int) -> int | None:
    """How many validations' weights a row's test score averages (None: the best checkpoint only)."""
    if row.split("/")[0] not in AVERAGED_PAPERS or validations < 2:
        return None
    return min(AVERAGE_LAST, validations)


@dataclass(frozen=True)
class Scored:
    """One seed of a row in the tables: its run's metrics, the test kind that holds the row's
    scores, and how to read a kind's test files (``read(kind)``: ``{"hyp": lines, "ref":
    lines}``); from an MLflow run here, from ``benchmarks/gpu_run.py``'s JSON there."""

    metrics: dict[str, float]
    read: Callable[[str], dict[str, list[str]]]
    kind: str = "test"

    def outputs(self) -> dict[str, list[str]]:
        return self.read(self.kind)

    def metric(self, key: str) -> float | None:
        """``key`` of this row (``test_bleu`` read from the kind's ``<kind>_bleu``)."""
        if key.startswith("test_"):
            key = f"{self.kind}_{key[len('test_'):]}"
        return self.metrics.get(key)


def latest_per_seed(runs: list, args) -> dict[str, dict[str, Any]]:
    """``{row: {seed: run}}``, the latest finished run of each trained (row, seed) that was
    trained exactly as ``args`` ask (size, budget: every logged setting), so that runs of another
    setting are neither reused nor mixed into the tables."""
    from platform.tracking.runs import run_params

    rows = trained_rows(args)
    by_row: dict[str, dict[str, Any]] = {}
    for run in sorted(runs, key=lambda r: r.info.start_time):
        row, seed = run.data.tags.get("study_row"), run.data.tags.get("seed", "")
        if row in rows and seed.isdigit():
            asked = run_params(row_config(row, int(seed), args), {})
            if all(run.data.params.get(key) == value for key, value in asked.items()):
                by_row.setdefault(row, {})[seed] = run
    return by_row


def scored_rows(by_row: dict[str, dict[str, Any]], shared: dict[str, str], outputs,
                curve=lambda run: {}, patience: int | None = None) -> dict[str, dict[str, Scored]]:
    """``{row: {seed: Scored}}`` for every table row with test scores: the trained rows' own,
    and the ``shared`` rows' from their source rows' runs; ``outputs(run, kind)`` reads a run's
    test files, ``curve(run)`` its dev BLEU by update (``convergence``)."""
    def scored(run, kind: str = "test") -> Scored:
        return Scored({**run.data.metrics, **convergence(curve(run), patience)}, lambda kind: outputs(run, kind),
                      kind)

    rows = {row: {seed: scored(run) for seed, run in seeds.items() if "test_bleu" in run.data.metrics}
            for row, seeds in by_row.items()}
    for row, source in shared.items():
        kind = f"test_as_{slug(row)}"
        rows[row] = {seed: scored(run, kind) for seed, run in by_row.get(source, {}).items()
                     if f"{kind}_bleu" in run.data.metrics}
    return {row: seeds for row, seeds in rows.items() if seeds}


def convergence(curve: dict[int, float], patience: int | None = None) -> dict[str, float]:
    """A run's dev BLEU by update → the update of its best validation (the first of equals),
    its last validation's, and 1.0 if it converged (no better dev BLEU over its last
    ``patience`` validations: its budget's early stopping, else ``PATIENCE``) else 0.0; {}
    without a curve."""
    if not curve:
        return {}
    best = min(curve, key=lambda step: (-curve[step], step))
    return {"best_step": float(best), "last_step": float(max(curve)),
            "converged": float(sum(step > best for step in curve) >= (patience or PATIENCE))}


def convergence_cells(best: list[float], last: list[float], converged: list[float]) -> dict[str, str]:
    """The tables' columns: each run's best update (of its last one: once for the row where
    every run ended at the same update, else run by run), and how many converged."""
    if not best:
        return {"best at update": "–", "converged": "–"}
    steps = [str(int(step)) for step in best]
    if len({int(step) for step in last}) == 1:
        cell = f"{', '.join(steps)} (of {int(last[0])})"
    else:
        cell = ", ".join(f"{step} (of {int(end)})" for step, end in zip(steps, last))
    return {"best at update": cell, "converged": f"{int(sum(converged))} of {len(converged)}"}


def seed_order(seed: str) -> list[int]:
    """A run's key in a table: ``SEED`` (the CPU study's), or ``I:SEED`` (the I-th GPU run's)."""
    return [int(part) for part in seed.split(":")]


def paper_tables(scored: dict[str, dict[str, Scored]], shared: dict[str, str], tokenizer: str,
                 heading: str = "###", seen: frozenset[str] = frozenset()) -> list[str]:
    """A section per paper table with runs (``paper_table``), titled at ``heading``'s level;
    after a table of ``REDECODED``, the same rows decoded as its recipe decodes."""
    sections = []
    for baseline, (title, rows) in TABLES.items():
        also = ALSO_COMPARED.get(baseline, [])
        if any(scored.get(row) for row in rows):
            sections.append(f"{heading} {title}\n\n"
                            f"{paper_table(baseline, rows, scored, shared, tokenizer, seen, also)}")
        if baseline in REDECODED and any(scored.get(row) for row in rows):
            again, labels, sources = redecoded(baseline, scored, shared)
            if again.get(labels[0]) and len(again) > 1:  # the baseline and a row decoded alike
                decoder = REDECODED[baseline]
                label = dict(zip(rows, labels))
                table = paper_table(labels[0], labels, again, sources, tokenizer, seen,
                                    [(label[row], label[against]) for row, against in also])
                sections.append(f"{heading} {title}, every row decoded as {decoder} decodes "
                                f"({decoding(decoder)})\n\n{table}")
    return sections


def redecoded(baseline: str, scored: dict[str, dict[str, Scored]], shared: dict[str, str]):
    """The rows of ``baseline``'s table decoded as ``REDECODED[baseline]`` decodes: ``({label:
    {seed: Scored}}, labels in the table's order, {label: source row}``); a row whose runs
    are the decoder's own (the ``shared`` baseline) reads their own test scores."""
    decoder = REDECODED[baseline]
    kind = f"test_as_{slug(decoder)}"
    rows, labels, sources = {}, [], {}
    for row in TABLES[baseline][1]:
        label = f"{row} as {decoder} decodes"
        labels.append(label)
        if shared.get(row) == decoder:
            rows[label], sources[label] = dict(scored.get(decoder, {})), decoder
            continue
        runs = {seed: dataclasses.replace(entry, kind=kind) for seed, entry in scored.get(row, {}).items()
                if f"{kind}_bleu" in entry.metrics}
        if runs:
            rows[label] = runs
    return rows, labels, sources


def paper_table(baseline: str, rows: list[str], by_row: dict[str, dict[str, Scored]], shared: dict[str, str],
                tokenizer: str, seen: frozenset[str] = frozenset(), also: list[tuple[str, str]] = ()) -> str:
    """One paper's rows that ran: scores over every run of each row, the seed-level test against
    ``baseline`` (unpaired: every run of both), and the paired tests against it on each seed both
    ran (``paired_cells``; BLEU with ``tokenizer``: the one the runs' own BLEU used); then the
    paper's ``also`` comparisons ((row, against)) whose two rows ran, tested alike, in one Holm
    family with the rows'."""
    from platform.tracking.significance import PAIRED, PAIRS_ALPHA, methods, seed_columns, seed_methods
    from platform.tracking.tables import format_table, mean_std

    ran = [row for row in rows if by_row.get(row)]
    if baseline not in ran:
        return f"The baseline {baseline} has not run: no table.\n"
    ran.remove(baseline)
    ran.insert(0, baseline)
    outputs = {row: {seed: entry.outputs() for seed, entry in by_row[row].items()} for row in ran}  # read once
    cells, bleu = [], []
    for row in ran:
        entries = [by_row[row][seed] for seed in sorted(by_row[row], key=seed_order)]

        def metric(key: str, entries: list[Scored] = entries) -> list[float]:
            return [value for entry in entries if (value := entry.metric(key)) is not None]

        bleu.append(metric("test_bleu"))
        averaged = next((key for entry in entries if entry.kind == "test" for key in sorted(entry.metrics)
                         if key.startswith("test_avg") and key.endswith("_bleu")), None)
        uas = " / ".join(f"{statistics.fmean(metric(k)):.3f}" for k in ("test_uas_enc", "test_uas_dec") if metric(k))
        source = f" (the {shared[row]} runs)" if row in shared else ""  # the runs' own decoding: see decoding
        unseen = mean_std([unseen_bleu(out, seen, tokenizer) for out in outputs[row].values()]) if seen else "–"
        cells.append({"row": row + source, "seeds": len(entries), "decoding": decoding(recipe_of(row)),
                      "test BLEU": mean_std(metric("test_bleu")), UNSEEN: unseen,
                      TOKENIZED: mean_std(metric("test_bleu_tok")) if metric("test_bleu_tok") else "–",
                      "test chrF": mean_std(metric("test_chrf")),
                      "BLEU, last validations averaged": (f"{mean_std(metric(averaged))} (last "
                                                          f"{averaged.split('_')[1][3:]})" if averaged else "–"),
                      "UAS enc / dec": uas or "–", "params": f"{int(metric('num_parameters')[0]):,}",
                      "train tok/s": f"{statistics.fmean(metric('tokens_per_s')):,.0f}",
                      "min per run": f"{statistics.fmean(metric('study_wall_s')) / 60:.1f}"
                      if metric("study_wall_s") else "–",
                      **convergence_cells(metric("best_step"), metric("last_step"), metric("converged")),
                      **paired_cells(outputs, baseline, row, tokenizer)})
    compared = [(row, against) for row, against in also if row in ran and against in ran]
    family = len(rows) - 1 + len(also)  # every comparison the paper's table makes, run or not (``holm``)
    seed_cells = seed_columns(bleu, also=[(ran.index(row), ran.index(against)) for row, against in compared],
                              family=family)
    for row, cell in zip(cells, seed_cells):  # the primary test: training's variance, over seeds
        row.update({key: value for key, value in cell.items() if key != "BLEU"})
    keep = ("row", "seeds", "decoding", "test BLEU", "Δ BLEU (95% CI)", "p (seeds)", "p (Holm)",
            *((UNSEEN,) if seen else ()), TOKENIZED, "test chrF", "best at update", "converged", *PAIRED,
            "BLEU, last validations averaged", "UAS enc / dec", "params", "train tok/s", "min per run")
    shown = [{key: row[key] for key in keep} for row in cells]
    first = next(iter(outputs[baseline].values()))["ref"]
    unseen = (f" {UNSEEN}: the same, without the {sum(reference in seen for reference in first)} test pairs whose "
              f"reference is also a training target." if seen else "")
    also_table = "" if not compared else "\n\n" + format_table([
        {"comparison": f"{row} against {against}", "seeds": f"{len(by_row[row])} / {len(by_row[against])}",
         **cell, **paired_cells(outputs, against, row, tokenizer)}
        for (row, against), cell in zip(compared, seed_cells[len(ran):])])
    return (f"{format_table(shown)}{also_table}\n\n"
            f"Test BLEU and chrF: mean ± std over every run of the row (sacrebleu, "
            f"detokenized; the primary metric).{unseen} {TOKENIZED}: sacrebleu on the tokenized hypotheses and "
            f"references, the kind of BLEU the papers report (not comparable across tokenizations). "
            f"Best at update: each run's best dev BLEU validation (the checkpoint scored); converged: the runs "
            f"whose dev BLEU gained nothing over their last validations, as many as the budget's patience "
            f"(without one, {PATIENCE}). "
            f"Primary, each row against {baseline} {seed_methods(family=holm_family(family, len(also)))}"
            f"{ALSO_CAPTION if compared else ''}. "
            f"Secondary, the test set's variance only: p (bs), p (ar) seed pair by seed pair (each run against "
            f"the baseline's run of the same seed, on its own), the median p over the pairs and how many of them "
            f"are below {PAIRS_ALPHA} ({methods(tokenizer)}).\n")


ALSO_CAPTION = "; under the table, the paper's other comparisons, tested alike, in the same Holm family"


def holm_family(family: int, also: int) -> str:
    """What a paper table's Holm family is, for its caption."""
    others = f" and its {also} other comparison{'s' if also > 1 else ''}" if also else ""
    return (f"the paper table's {family} comparisons (each row against the baseline{others}), those without "
            f"runs yet counted as p = 1, so a Holm p can only fall as they run")


def paired_cells(outputs: dict[str, dict[str, dict[str, list[str]]]], baseline: str, row: str,
                 tokenizer: str) -> dict[str, str]:
    """``row`` against ``baseline`` by the paired tests seed pair by seed pair (seed s of one
    against seed s of the other, whichever call trained each: ``significance.paired_by_seed``);
    "–" for the baseline itself and where they share no seed."""
    from platform.tracking.significance import paired_by_seed

    if row == baseline:
        return paired_by_seed([], tokenizer)
    by_seed = [{seed_order(run)[-1]: runs[run] for run in sorted(runs, key=seed_order)} for runs in
               (outputs[baseline], outputs[row])]  # a pooled budget has one run of each seed
    return paired_by_seed([(by_seed[0][seed]["hyp"], by_seed[1][seed]["hyp"], by_seed[0][seed]["ref"])
                           for seed in sorted(set(by_seed[0]) & set(by_seed[1]))], tokenizer)


def recipe_of(label: str) -> str:
    """The recipe whose decoding a table row shows: the row's own, or for ``redecoded``'s
    "ROW as RECIPE decodes", that recipe's."""
    return label.split(" as ")[1].removesuffix(" decodes") if " as " in label else label


def decoding(row: str) -> str:
    from platform.training.recipes import get_recipe

    training = get_recipe(row).training
    beam, alpha = training.get("decode.beam", 1), training.get("decode.alpha", 0.0)
    return "greedy" if beam == 1 else f"beam {beam}, α {alpha}"


def dev_curves(client, by_row: dict[str, dict[str, Any]], rows: list[str]) -> dict[str, dict[int, float]]:
    """``{row: {update: dev BLEU, mean over seeds}}`` from the runs' metric histories."""
    curves = {}
    for row in rows:
        points: dict[int, list[float]] = {}
        for run in by_row.get(row, {}).values():
            for point in client.get_metric_history(run.info.run_id, "dev_bleu"):
                points.setdefault(point.step, []).append(point.value)
        if points:
            curves[row] = mean_curve(points)
    return curves


def mean_curve(points: dict[int, list[float]]) -> dict[int, float]:
    """A row's curve: at each step, the mean over its runs of what they logged there."""
    return {step: statistics.fmean(values) for step, values in sorted(points.items())}


def curves_table(curves: dict[str, dict[int, float]]) -> str:
    from platform.tracking.tables import format_table

    steps = sorted({step for curve in curves.values() for step in curve})
    return format_table([{"row": row, **{str(step): f"{curve[step]:.2f}" if step in curve else "–" for step in steps}}
                         for row, curve in curves.items()])


def plot_curves(curves: dict[str, dict[int, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.5))
    for row, curve in curves.items():
        axes.plot(list(curve), list(curve.values()), marker="o", label=row)
    axes.set_xlabel("update")
    axes.set_ylabel("dev BLEU (mean over seeds)")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def tables(args) -> str:
    """The generated section: every paper table with runs, the dev curves, the budget and the
    study's wall time."""
    from mlflow.tracking import MlflowClient

    from platform.tracking.significance import logged_tokenizer, test_outputs

    client = MlflowClient(args.tracking_uri)
    shared = decoded_as(args)
    by_row = latest_per_seed(finished_runs(client, args.experiment), args)
    with tempfile.TemporaryDirectory() as scratch:
        scored = scored_rows(by_row, shared, lambda run, kind: test_outputs(client, run.info.run_id, Path(scratch),
                                                                            kind),
                             lambda run: {point.step: point.value
                                          for point in client.get_metric_history(run.info.run_id, "dev_bleu")},
                             args.patience)
        if not scored:
            return "No study run is in the MLflow store yet.\n"
        first = next(seeds[min(seeds, key=int)] for seeds in by_row.values())
        sections = paper_tables(scored, shared, logged_tokenizer(client, first.info.run_id),
                                seen=training_targets(Path(args.tanaka)))
    trained = [row for row in trained_rows(args) if by_row.get(row)]
    curves = dev_curves(client, by_row, trained)
    plot_curves(curves, Path(args.figure))
    figure = os.path.relpath(args.figure, Path(args.out).parent)
    runs = [run for seeds in by_row.values() for run in seeds.values()]
    wall = sum(run.data.metrics.get("study_wall_s", 0.0) for run in runs)
    budgets = sorted({run.data.params.get("max_updates", "?") for run in runs})
    sections.append(f"### Dev BLEU by update (mean over seeds)\n\n{curves_table(curves)}\n\n"
                    f"![dev BLEU by update]({figure})\n")
    sections.append(f"{len(runs)} runs ({' or '.join(budgets)} updates each); the study's wall time, training "
                    f"and test decoding: {wall / 60:.0f} min. Rows not run: "
                    f"{', '.join(r for r in trained_rows(args) if r not in trained) or 'none'}.\n")
    return "\n".join(sections)


def write_section(path: Path, text: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace what stands between the markers of ``path`` (appended where it has none)."""
    block = f"{begin}\n\n{text}\n{end}"
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if begin in old and end in old:
        new = old[:old.index(begin)] + block + old[old.index(end) + len(end):]
    else:
        new = f"{old.rstrip()}\n\n{block}\n" if old else f"{block}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new, encoding="utf-8")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    shared = decoded_as(args)
    unknown = [row for row in args.rows if row not in trained_rows(args)]
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; rows: {trained_rows(args)} (a row of {list(shared)} is "
                         "scored from its source row's runs)")
    if not args.table_only:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(args.tracking_uri)
        device = "cuda" if args.gpus_per_worker else "cpu"
        dataset = prepare(args)
        started = time.time()
        rows = args.rows + [baseline for baseline, (_, table) in TABLES.items()  # a table's own baseline
                            if baseline not in args.rows + list(shared) and set(table) & set(args.rows)]
        from platform.launch.cluster import start_ray  # Ray: only where the study trains
        from platform.tracking.relay import held_relay

        start_ray(None)
        with held_relay(args.tracking_uri):  # the MLflow relay lives while the study trains
            for seed in range(1, args.seeds + 1):  # seed by seed: an interrupted study has whole seeds
                for row in rows:
                    run = latest_per_seed(finished_runs(client, args.experiment), args).get(row, {}).get(str(seed))
                    if run is None:
                        run = client.get_run(run_row(row, seed, args, dataset))
                    complete(run, args, device, shared)
        sys.stderr.write(f"[study] this invocation: {time.time() - started:.0f} s\n")
    text = tables(args)
    write_section(Path(args.out), text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
