"""Paired significance tests of test-set outputs logged to MLflow runs (sacrebleu's
``PairedTest``): what ``platform.report`` and a sweep's confirmation stage compare with.

Both tests for BLEU (the tokenizer the runs' own BLEU used) and chrF: paired bootstrap
resampling (1000 samples; the mean and 95% CI of each system) and approximate randomisation
(10000 trials), every system against the first (the baseline) in one test.
"""

from __future__ import annotations

import re
from pathlib import Path

BOOTSTRAP_SAMPLES = 1000
RANDOMISATION_TRIALS = 10000


def paired_tests(named: list[tuple[str, list[str]]], references: list[str], tokenizer: str) -> dict[str, dict[str, list]]:
    """``{"bs"|"ar": {"BLEU"|"chrF2": [result per system]}}`` for ``named`` systems (the first is
    the baseline) against ``references``."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    metrics = {"BLEU": BLEU(tokenize=tokenizer, force=True), "chrF2": CHRF()}  # keyed by sacrebleu's names
    return {test_type: PairedTest(named, metrics=metrics, references=[references], test_type=test_type,
                                  n_samples=samples)()[1]
            for test_type, samples in (("bs", BOOTSTRAP_SAMPLES), ("ar", RANDOMISATION_TRIALS))}


def test_outputs(client, run_id: str, directory: Path) -> dict[str, list[str]] | None:
    """A run's logged test files (``hyp``, ``ref``, ``tok.hyp``, ...) as lines, or None."""
    tests = [a.path for a in client.list_artifacts(run_id, "test")]
    if not tests:
        return None
    local = Path(client.download_artifacts(run_id, tests[0], str(directory / run_id)))
    return {p.name.split(".", 1)[1]: p.read_text(encoding="utf-8").splitlines() for p in local.iterdir()}


def logged_tokenizer(client, run_id: str) -> str:
    """The sacrebleu tokenizer the run's own BLEU used (``tok:`` of its ``sacrebleu_signature``:
    ``ja-mecab`` for Japanese, ``zh`` for Chinese, ``13a`` otherwise), so the tested BLEU is the
    logged one."""
    tags = client.get_run(run_id).data.tags
    signature = tags.get("test_sacrebleu_signature") or tags.get("sacrebleu_signature", "")
    found = re.search(r"tok:([^|]+)", signature)
    return found.group(1) if found else "13a"
