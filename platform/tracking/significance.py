"""Paired significance tests of test-set outputs logged to MLflow runs (sacrebleu's
``PairedTest``), and the table that shows them: what ``platform.report`` and a sweep's
confirmation stage (``launch.confirm``) both write.

Both tests for BLEU (the tokenizer the runs' own BLEU used) and chrF, every system against the
first (the baseline) in one test: paired bootstrap resampling (``BOOTSTRAP_SAMPLES``; the mean
and 95% CI of each system) and approximate randomisation (``RANDOMISATION_TRIALS``), both
seeded with ``SEED``.  ``methods`` states these in the tables' captions.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BOOTSTRAP_SAMPLES = 1000
RANDOMISATION_TRIALS = 10000
SEED = 12345  # both tests' random generator (sacrebleu reads it from SACREBLEU_SEED)
METRICS = ("BLEU", "chrF2")  # sacrebleu's names, the table's column prefixes


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
    return (f"sacrebleu: BLEU with `tokenize={tokenizer}`, chrF; paired bootstrap, {BOOTSTRAP_SAMPLES} resamples, "
            f"mean ± 95% CI; approximate randomisation, {RANDOMISATION_TRIALS} trials; seed {SEED}; "
            "p against the baseline")


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
