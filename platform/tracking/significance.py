"""Paired significance tests of test-set outputs logged to MLflow runs (sacrebleu's
``PairedTest``), and the table that shows them: what ``platform.report`` and a sweep's
confirmation stage (``sweeps.confirm``) both write.

Both tests for BLEU (the tokenizer the runs' own BLEU used) and chrF, every system against the
first (the baseline) in one test: paired bootstrap resampling (``BOOTSTRAP_SAMPLES``; the mean
and 95% CI of each system) and approximate randomisation (``RANDOMISATION_TRIALS``), both
seeded with ``SEED``.  ``methods`` states these in the tables' captions.  They resample test
sentences: they measure the test set's variance, not training's.

Training's variance is tested at the seed level (``seed_test``, ``seed_columns``): each seed is
one independent training run, so a row's scores over seeds are its sample, and the difference
of two rows' means is tested with Welch's t-test (two-sided, unequal variances: a syntax model's
seeds need not vary as the baseline's do), with its 95 % confidence interval, and the p-values of
one table (its rows against the same baseline) corrected together with Holm's step-down method,
over a family planned in advance where the table is a paper's (``holm``'s ``family``).
Welch rather than an almost-stochastic-order test: with 3 to 5 seeds a row, a mean difference and
its interval are what a reader compares with the papers' reported gains, and it needs nothing
beyond scipy.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platform.tracking.tables import mean_std

BOOTSTRAP_SAMPLES = 1000
RANDOMISATION_TRIALS = 10000
SEED = 12345  # both tests' random generator (sacrebleu reads it from SACREBLEU_SEED)
METRICS = ("BLEU", "chrF2")  # sacrebleu's names, the table's column prefixes
PAIRS_ALPHA = 0.05  # the level below which ``paired_by_seed`` counts a seed pair's p
PAIRED = tuple(f"{metric} p ({test})" for metric in METRICS for test in ("bs", "ar"))  # ``paired_by_seed``'s cells


def paired_tests(named: list[tuple[str, list[str]]], references: list[str],
                 tokenizer: str) -> dict[str, dict[str, list]]:
    """``{"bs"|"ar": {"BLEU"|"chrF2": [result per system]}}`` for ``named`` systems (the first is
    the baseline) against ``references``."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    metrics = {"BLEU": BLEU(tokenize=tokenizer, force=True), "chrF2": CHRF()}  # keyed by sacrebleu's names
    results = {}
    for test_type, samples in (("bs", BOOTSTRAP_SAMPLES), ("ar", RANDOMISATION_TRIALS)):
        with _seeded(SEED):  # PairedTest reads the seed when it is made
            test = PairedTest(named, metrics=metrics, references=[references], test_type=test_type, n_samples=samples)
        results[test_type] = test()[1]
    return results


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    before = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = before


def methods(tokenizer: str) -> str:
    """How ``paired_tests`` tested, for a table's caption."""
    return (f"sacrebleu: BLEU with `tokenize={tokenizer}`, chrF; paired bootstrap, {BOOTSTRAP_SAMPLES} resamples "
            f"(the `bootstrap` columns, where shown: its mean ± 95% CI); approximate randomisation, "
            f"{RANDOMISATION_TRIALS} trials; seed {SEED}; p against the baseline")


def significance_table(rows: list[dict[str, Any]], hypotheses: list[list[str]], references: list[str],
                       tokenizer: str) -> list[dict[str, Any]]:
    """``rows`` (one per system, the baseline first; each with the caller's own cells) with each
    metric's cells added: the score of the system's ``hypotheses``, the bootstrap mean ± 95% CI,
    and both tests' p against the baseline ("–" for the baseline itself)."""
    named = [(f"system {i}", lines) for i, lines in enumerate(hypotheses)]
    results = paired_tests(named, references, tokenizer)
    table = []
    for i, row in enumerate(rows):
        cells = dict(row)
        for metric in METRICS:
            bootstrap, randomisation = results["bs"][metric][i], results["ar"][metric][i]
            cells[metric] = f"{bootstrap.score:.2f}"
            cells[f"{metric} bootstrap"] = f"{bootstrap.mean:.2f} ± {bootstrap.ci:.2f}"
            cells[f"{metric} p (bs)"] = "–" if i == 0 else f"{bootstrap.p_value:.4f}"
            cells[f"{metric} p (ar)"] = "–" if i == 0 else f"{randomisation.p_value:.4f}"
        table.append(cells)
    return table


def paired_by_seed(pairs: list[tuple[list[str], list[str], list[str]]], tokenizer: str) -> dict[str, str]:
    """A system against the baseline by both paired tests, seed pair by seed pair: ``pairs`` holds
    (baseline's hypotheses, system's hypotheses, references) of each seed both ran, each pair tested
    on its own (concatenated, the seeds' outputs would pass for one test set as many times larger,
    and a small p would say only that).  Each p column's cell: the median p over the pairs, and
    how many of them are below ``PAIRS_ALPHA``; "–" where there is no pair."""
    tested = [significance_table([{}, {}], [baseline, system], references, tokenizer)[1]
              for baseline, system, references in pairs]
    return {key: pairs_cell([float(pair[key]) for pair in tested]) if tested else "–" for key in PAIRED}


def pairs_cell(p_values: list[float]) -> str:
    """The seed pairs' p-values of one test as a cell: their median, and how many are below ``PAIRS_ALPHA``."""
    below = sum(p < PAIRS_ALPHA for p in p_values)
    return f"{statistics.median(p_values):.4f} ({below} of {len(p_values)} < {PAIRS_ALPHA})"


def test_outputs(client, run_id: str, directory: Path, kind: str = "test") -> dict[str, list[str]] | None:
    """A run's logged test files (``hyp``, ``ref``, ``tok.hyp``, ...) of ``kind`` (``test``,
    ``test_avg5``, ...) as lines, or None."""
    tests = [a.path for a in client.list_artifacts(run_id, kind)]
    if not tests:
        return None
    local = Path(client.download_artifacts(run_id, tests[0], str(directory / run_id)))
    return {p.name.split(".", 1)[1]: p.read_text(encoding="utf-8").splitlines() for p in local.iterdir()}


def logged_tokenizer(client, run_id: str) -> str:
    """The sacrebleu tokenizer the run's own BLEU used (``tok:`` of its ``sacrebleu_signature``:
    ``ja-mecab`` for Japanese, ``zh`` for Chinese, ``13a`` otherwise), so the tested BLEU is the
    logged one."""
    tags = client.get_run(run_id).data.tags
    return signature_tokenizer(tags.get("test_sacrebleu_signature") or tags.get("sacrebleu_signature", ""))


def signature_tokenizer(signature: str) -> str:
    """The tokenizer a sacrebleu BLEU ``signature`` names (``tok:``), ``13a`` where it names none."""
    found = re.search(r"tok:([^|]+)", signature)
    return found.group(1) if found else "13a"


@dataclass(frozen=True)
class SeedTest:
    """One row against the baseline over seeds: the difference of the means, its 95 % confidence
    interval and Welch's two-sided p (NaN where a side has fewer than 2 seeds)."""

    difference: float
    low: float
    high: float
    p_value: float


def seed_test(baseline: Sequence[float], system: Sequence[float]) -> SeedTest:
    """Welch's t-test of ``system``'s mean against ``baseline``'s (each a score per seed):
    t = (x̄_s − x̄_b) / √(s_s²/n_s + s_b²/n_b), with the Welch–Satterthwaite degrees of freedom.
    Untestable (NaN) where a side has one seed, or where neither side's seeds vary: a difference
    without any spread to weigh it against is not evidence, and p 0 would claim it is."""
    from scipy import stats

    difference = statistics.fmean(system) - statistics.fmean(baseline)
    if len(system) < 2 or len(baseline) < 2:
        return SeedTest(difference, math.nan, math.nan, math.nan)
    var_s, var_b = statistics.variance(system) / len(system), statistics.variance(baseline) / len(baseline)
    se = math.sqrt(var_s + var_b)
    if se == 0.0:  # identical seeds on both sides: no spread to test against
        return SeedTest(difference, math.nan, math.nan, math.nan)
    df = (var_s + var_b) ** 2 / (var_s ** 2 / (len(system) - 1) + var_b ** 2 / (len(baseline) - 1))
    p_value = float(stats.ttest_ind(system, baseline, equal_var=False).pvalue)
    margin = float(stats.t.ppf(0.975, df)) * se
    return SeedTest(difference, difference - margin, difference + margin, p_value)


def holm(p_values: Sequence[float], family: int | None = None) -> list[float]:
    """Holm's step-down adjustment of a family of p-values: the i-th smallest of m is multiplied
    by m − i + 1, kept monotone, capped at 1.  NaN (untested) stays NaN.  ``family``: the size
    m of the family planned in advance (a paper table's comparisons, some not run yet), the
    missing ones counted as p = 1 (ranked last): an adjusted p can then only fall as they are
    run, so what is significant now stays so; by default m is the tested p-values' count."""
    order = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m = len(order) if family is None else family
    if m < len(order):
        raise ValueError(f"a family of {m} cannot hold {len(order)} p-values")
    adjusted, running = [math.nan] * len(p_values), 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def seed_columns(scores: list[list[float]], metric: str = "BLEU",
                 also: Sequence[tuple[int, int]] = (), family: int | None = None) -> list[dict[str, str]]:
    """The seed-level cells of a table whose first row is the baseline (``scores``: each row's
    ``metric`` per seed): mean ± std, the difference to the baseline with its 95 % CI, Welch's p
    and Holm's p ("–" for the baseline, and where a side has one seed); after them, the
    difference cells of each of ``also``'s comparisons: (row, against) index pairs that a paper
    makes besides each row against its baseline.  Holm's family is every comparison of the
    table, the rows' and ``also``'s, or ``family`` of them where more are planned (``holm``)."""
    pairs = [(0, row) for row in range(1, len(scores))] + [(against, row) for row, against in also]
    tests = [seed_test(scores[against], scores[row]) for against, row in pairs]
    adjusted = holm([t.p_value for t in tests], family)
    cells = [_difference_cells(test, holm_p, metric) for test, holm_p in zip(tests, adjusted)]
    rows = len(scores) - 1
    baseline = {metric: mean_std(scores[0]), f"Δ {metric} (95% CI)": "–", "p (seeds)": "–", "p (Holm)": "–"}
    return [baseline, *({metric: mean_std(score), **cell} for score, cell in zip(scores[1:], cells[:rows])),
            *cells[rows:]]


def _difference_cells(test: SeedTest, holm_p: float, metric: str) -> dict[str, str]:
    interval = "" if math.isnan(test.low) else f" [{test.low:+.2f}, {test.high:+.2f}]"
    return {f"Δ {metric} (95% CI)": f"{test.difference:+.2f}{interval}",
            "p (seeds)": "–" if math.isnan(test.p_value) else f"{test.p_value:.4f}",
            "p (Holm)": "–" if math.isnan(holm_p) else f"{holm_p:.4f}"}


def seed_methods(metric: str = "BLEU", family: str = "") -> str:
    """How ``seed_columns`` tested, for a table's caption (``family``: what Holm's family is, where
    not the table's rows)."""
    default = "the table's rows"
    return (f"over seeds: {metric} mean ± std; Δ: the row's mean minus the baseline's, with Welch's 95% CI; "
            "p (seeds): Welch's t-test, two-sided ('–' where a side has one run, or neither side's runs vary); "
            f"p (Holm): Holm's correction over {family or default}")
