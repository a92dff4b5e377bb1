"""The confirmation stage of a sweep (``platform.tune --confirm K``): what a paper may report.

A sweep's best dev score is one seed's, chosen among many: it overstates the config.  After the
search, the K best distinct configs and the space's paper baseline (its ``baseline`` recipe) are
trained again from scratch, each with ``--confirm-seeds`` seeds, to the full epoch budget
(nothing stops them early), and each run's best checkpoint is decoded on the test split with
its recipe's decoding (beam, length penalty), as ``platform.evaluate --run`` does.  The parent
run then gets, per config, test BLEU and chrF as mean ± std over the seeds and, against the
baseline (``tracking.significance``), the primary test over seeds (each seed one training run:
the difference of the means with its 95 % CI, Welch's p, Holm's correction over the table), then
the paired tests (bootstrap, approximate randomisation, sacrebleu) seed pair by seed pair (seed s
of a config against seed s of the baseline, sentence by sentence, each pair on its own), which
measure the test set's variance only.

The confirmation runs are one more Ray Tune experiment, ``SWEEP-confirm``, beside the sweep's:
a grid over (config, seed), every run an MLflow child run of the sweep tagged ``stage=confirm``
and ``confirm_of``; ``--resume`` restores it like the search (finished runs are kept, their
test scores read back from MLflow).
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platform.data.dataset import read_examples
from platform.inference import Trained, write_outputs
from platform.launch.cluster import DRIVER_CPU, placement_group_ids, release_orphaned_groups
from platform.launch.driver import Job, run
from platform.scoring import METRICS
from platform.sweeps.continuation import experiment_name, under
from platform.sweeps.spaces import RECIPE_KNOB
from platform.tracking import runs, significance, store
from platform.tracking.logger import RunLogger
from platform.tracking.run_files import log_test_results
from platform.tracking.significance import logged_tokenizer, methods, paired_by_seed, test_outputs
from platform.tracking.tables import format_table, mean_std, to_csv
from platform.training.config import load_train_config

STAGE = "confirm"
TABLE = "confirmation.md"


@dataclass(frozen=True)
class Candidate:
    """A config to confirm: a trial's (its knobs) or the baseline recipe's."""

    label: str  # "trial <id>" or "baseline <recipe>"
    config: dict[str, Any]  # the full config data; its seed is set per run
    knobs: dict[str, Any]
    is_baseline: bool = False


@dataclass
class Confirmation:
    rows: list[dict[str, Any]]
    seeds: int
    test_sentences: int
    tests: str  # how the configs were tested against the baseline, or why they were not
    winner_run_id: str = ""  # the run of the best mean test BLEU's config with its best dev score

    def winner_line(self) -> str:
        return f"the confirmation's winner: {self.winner_label}, run {self.winner_run_id}"

    @property
    def winner_label(self) -> str:
        return max(self.rows, key=lambda row: row["test_bleu_mean"])["config"] if self.rows else ""


def candidates(sweep, rows: list[dict[str, Any]], k: int) -> list[Candidate]:
    """The baseline (where the space names one) and the ``k`` best distinct configs among the
    finished and pruned trials (``rows`` come best first)."""
    chosen: list[Candidate] = []
    seen: list[dict[str, Any]] = []
    space = sweep.space
    if space.baseline_config is not None:
        chosen.append(Candidate(f"baseline {space.spec.baseline}", copy.deepcopy(space.baseline_config), {}, True))
    for row in rows:
        if row["status"] not in ("COMPLETE", "PRUNED") or space.spec.metric not in row:
            continue
        knobs = {key: row[key] for key in space.knobs if row.get(key) is not None}
        if knobs in seen:
            continue  # the same config with another seed (--seeds-per-config)
        seen.append(knobs)
        chosen.append(Candidate(f"trial {row['trial']}", space.trial_config(knobs), knobs))
        if len(seen) == k:
            break
    return chosen


@dataclass(frozen=True)
class ConfirmSetup:
    """What every confirmation trial is given besides its entry (``ray.tune.with_parameters``)."""

    candidates: list[Candidate]
    entries: list[dict[str, int]]  # a trial's config names one: the candidate's index and a seed
    recipes: list[str]  # each candidate's recipe
    job: Job  # every run's, but for its run name and start time
    sweep: str  # the sweep's name
    parent_run_id: str  # the sweep's MLflow parent run


def confirm_trial(config: dict[str, Any], setup: ConfirmSetup) -> None:
    """One confirmation run: train the candidate with its seed (a fresh MLflow child run, or the
    one a restarted trial left), then decode the test split with its best checkpoint and log
    the scores and files to that run, once."""
    import ray.tune

    trial_id = ray.tune.get_context().get_trial_id()
    entry = setup.entries[config["entry"]]
    candidate = setup.candidates[entry["index"]]
    data = copy.deepcopy(candidate.config)
    data["seed"] = int(entry["seed"])
    config = load_train_config(data)
    job = dataclasses.replace(setup.job, run_name=f"{setup.sweep}-confirm-{trial_id}", started_at=time.time())
    tags = {"trial_id": trial_id, "sweep": setup.sweep, "stage": STAGE, "confirm_of": candidate.label,
            "recipe": setup.recipes[entry["index"]]}
    reuse = {"mlflow.parentRunId": setup.parent_run_id, "trial_id": trial_id, "stage": STAGE}
    run_id = runs.find_run(job.tracking_uri, job.experiment, reuse)
    client = store.client(job.tracking_uri)
    finished = run_id is not None and client.get_run(run_id).info.status == "FINISHED"
    if not finished:
        run_id = run(config, job, parent_run_id=setup.parent_run_id, tags=tags, reuse=reuse)
    metrics = client.get_run(run_id).data.metrics
    if "test_bleu" not in metrics:
        metrics = score_on_test(job, run_id)
    ray.tune.report({"test_bleu": metrics["test_bleu"], "test_chrf": metrics["test_chrf"], "run_id": run_id})


def score_on_test(job, run_id: str) -> dict[str, float]:
    """Decode the dataset's test split with the run's best checkpoint (its recipe's decoding)
    and log the metrics (every one of ``scoring.METRICS``) and output files to the run, as
    ``platform.evaluate --run --metrics bleu,chrf,chrf++,ter`` does."""

    trained = Trained.load(run_id=run_id, tracking_uri=job.tracking_uri)
    every = tuple(METRICS)  # BLEU, chrF, chrF++ and TER: test_chrfpp, test_ter beside test_bleu, test_chrf
    result, references = trained.score_examples(read_examples(job.dataset.location, "test"), metrics=every)
    with tempfile.TemporaryDirectory(prefix="nmt-confirm-") as scratch:
        files = write_outputs(Path(scratch) / "test", result.hypotheses, references, trained.tgt_lang, every)
        log_test_results(job.tracking_uri, run_id, result, files, "test")
    return result.metrics


def run_confirmation(sweep, rows: list[dict[str, Any]], k: int, seeds: int, resume: bool = False,
                     verbose: bool = False) -> Confirmation:
    """Train and test the candidates (``candidates``) with ``seeds`` seeds each, then log the
    table on the sweep's parent run; returns it."""
    import ray.tune

    chosen = candidates(sweep, rows, k)
    base_seed = sweep.space.base_config.seed
    entries = [{"index": i, "seed": base_seed + s} for i in range(len(chosen)) for s in range(seeds)]
    setup = ConfirmSetup(candidates=chosen, entries=entries, recipes=[_recipe(sweep, c) for c in chosen],
                         job=sweep.job, sweep=sweep.name, parent_run_id=sweep.parent_run_id)
    trainable = ray.tune.with_resources(ray.tune.with_parameters(confirm_trial, setup=setup), {"CPU": DRIVER_CPU})
    from platform.sweeps.callbacks import ConfirmProgress  # Ray Tune: heavy, where a sweep runs

    path = under(str(sweep.job.storage_path), f"{experiment_name(sweep.name, sweep.extension)}-{STAGE}")
    if resume and ray.tune.Tuner.can_restore(path):
        tuner = ray.tune.Tuner.restore(path, trainable=trainable, resume_errored=True)
    else:
        tuner = ray.tune.Tuner(
            trainable, param_space={"entry": ray.tune.grid_search(list(range(len(entries))))},
            tune_config=ray.tune.TuneConfig(num_samples=1, max_concurrent_trials=sweep.max_concurrent),
            run_config=ray.tune.RunConfig(name=f"{experiment_name(sweep.name, sweep.extension)}-{STAGE}",
                                          storage_path=str(sweep.job.storage_path),
                                          verbose=None if verbose else 0,
                                          callbacks=[ConfirmProgress([c.label for c in chosen], entries)]))
    before = placement_group_ids()
    results = tuner.fit()
    release_orphaned_groups(before=before)  # what runs stopped mid-start left reserved
    failed = [r for r in results if r.error is not None or not r.metrics or "run_id" not in r.metrics]
    if failed:
        raise RuntimeError(f"{len(failed)} confirmation run(s) failed; the first: {failed[0].error}")
    scored = {(entries[r.config["entry"]]["index"], entries[r.config["entry"]]["seed"]): r.metrics["run_id"]
              for r in results}
    confirmation = confirmation_table(sweep, chosen, scored, seeds)
    winner = max(range(len(chosen)), key=lambda i: confirmation.rows[i]["test_bleu_mean"])
    confirmation.winner_run_id = best_by_dev(sweep, [scored[key] for key in sorted(scored) if key[0] == winner])
    log_confirmation(sweep, confirmation)
    return confirmation


def best_by_dev(sweep, run_ids: list[str]) -> str:
    """Of one config's seed runs, the one with the best dev score (the sweep's metric at its best
    validation): the config was chosen on test, the run among its seeds is not."""
    client = store.client(sweep.tracking_uri)
    metric, mode = sweep.space.spec.metric, dict(sweep.space.objectives).get(sweep.space.spec.metric, "max")
    pick = max if mode == "max" else min

    def best(run_id: str) -> float:
        values = [m.value for m in client.get_metric_history(run_id, metric)]
        return pick(values) if values else (float("-inf") if mode == "max" else float("inf"))

    return pick(run_ids, key=best)


def _recipe(sweep, candidate: Candidate) -> str:
    return sweep.space.spec.baseline if candidate.is_baseline else sweep.space.recipe_of(candidate.knobs)


def confirmation_table(sweep, chosen: list[Candidate], scored: dict[tuple[int, int], str], seeds: int) -> Confirmation:
    """Per candidate: test BLEU and chrF mean ± std over its seeds; against the baseline, the
    primary test over seeds (the difference of the means with its 95 % CI, Welch's p and Holm's
    over the table: training's variance) and, secondary, the paired tests seed pair by seed pair
    (the test set's variance only; ``tracking.significance.paired_by_seed``)."""
    client = store.client(sweep.tracking_uri)
    rows, outputs, bleu = [], [], []
    with tempfile.TemporaryDirectory(prefix="nmt-confirm-") as scratch:
        for index, candidate in enumerate(chosen):
            keys = [key for key in sorted(scored) if key[0] == index]
            metrics = [client.get_run(scored[key]).data.metrics for key in keys]
            outputs.append({seed: test_outputs(client, scored[(index, seed)], Path(scratch)) for _, seed in keys})
            row = {"config": candidate.label, "recipe": _recipe(sweep, candidate),
                   **{key: candidate.knobs.get(key) for key in sweep.space.knobs if key != RECIPE_KNOB},
                   "seeds": len(keys)}
            for key in ("test_bleu", "test_chrf"):
                values = [m[key] for m in metrics]
                row[key] = mean_std(values)
                row[f"{key}_mean"] = statistics.mean(values)
            bleu.append([m["test_bleu"] for m in metrics])
            rows.append(row)
        tokenizer = logged_tokenizer(client, scored[min(scored)])
    sentences = len(next(iter(outputs[0].values()))["ref"]) if outputs and outputs[0] else 0
    if not chosen or not chosen[0].is_baseline:
        return Confirmation(rows, seeds, sentences, tests="no baseline: the space names no baseline recipe, "
                                                          "so no significance test")
    for row, cells in zip(rows, significance.seed_columns(bleu)):  # the primary test: over seeds
        row.update({key: value for key, value in cells.items() if key != "BLEU"})
    for row, files in zip(rows, outputs):  # secondary: each seed pair on its own ("–" for the baseline)
        common = sorted(set(files) & set(outputs[0])) if row is not rows[0] else []
        row.update(paired_by_seed([(outputs[0][seed]["hyp"], files[seed]["hyp"], outputs[0][seed]["ref"])
                                   for seed in common], tokenizer))
    return Confirmation(rows, seeds, sentences,
                        tests=f"primary, each config against the baseline {significance.seed_methods()}; "
                              f"secondary, the test set's variance only: p (bs), p (ar) seed pair by seed pair "
                              f"(each config's seed s against the baseline's seed s, on its own), the median p "
                              f"over the pairs and how many are below {significance.PAIRS_ALPHA} "
                              f"({methods(tokenizer)})")


def shown_rows(confirmation: Confirmation) -> list[dict[str, Any]]:
    """The table's rows without the helper means."""
    return [{k: v for k, v in row.items() if not k.endswith("_mean")} for row in confirmation.rows]


def confirmation_text(confirmation: Confirmation) -> str:
    """The confirmation table as markdown, with what it measured."""
    return (f"## Confirmation on test\n\nEach config trained {confirmation.seeds} times (seeds) to the full "
            f"budget, its best checkpoint decoded on the {confirmation.test_sentences} test sentences with its "
            f"recipe's decoding; test BLEU and chrF (sacrebleu) as mean ± std over the seeds; "
            f"{confirmation.tests}.\n\n{format_table(shown_rows(confirmation))}\n")


def log_confirmation(sweep, confirmation: Confirmation) -> None:
    """The table (markdown and CSV), each config's mean test scores and a tag on the parent run."""
    logger = RunLogger(sweep.tracking_uri, sweep.parent_run_id, reopen=False)
    logger.text(confirmation_text(confirmation), TABLE)
    logger.text(to_csv(shown_rows(confirmation)), "confirmation.csv")
    for rank, row in enumerate(confirmation.rows):
        logger.metrics({f"confirm_{rank}_test_bleu_mean": row["test_bleu_mean"],
                        f"confirm_{rank}_test_chrf_mean": row["test_chrf_mean"]}, step=0)
    logger.tag("confirmation", TABLE)


def confirmation_lines(confirmation: Confirmation) -> str:
    """What the console shows after the sweep's own closing lines."""
    return "\n" + confirmation_text(confirmation)
