"""Plain-text translations scored against plain-text references: ``platform.evaluate --hyp``.

One sentence per line, detokenized (as a system's output and a WMT/WAT reference are), UTF-8.
BLEU with sacreBLEU's ``tokenize`` (``TOKENIZERS``; the default is the target language's, as
the platform scores its own runs: ``training.metrics.SACREBLEU_TOKENIZER``, else ``13a``) and
chrF, with the signature and the ``sacrebleu`` commands that recompute both from the same files.
``compare`` tests two systems against one reference with sacreBLEU's paired bootstrap and
approximate randomisation (``tracking.significance``, the tests a sweep's confirmation uses).

Input rules: an invalid UTF-8 byte or an empty *reference* line is an error at its line; an empty
*hypothesis* line is an empty translation and is scored as one (a system may output nothing);
files whose line counts differ are an error.  Nothing is written when the input is bad.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from platform.errors import InputError, UserError
from platform.tracking import significance
from platform.tracking.significance import significance_table
from platform.training.metrics import SACREBLEU_TOKENIZER

# sacreBLEU's tokenizers (its ``--tokenize`` choices); ja-mecab and ko-mecab need sacrebleu[ja] / [ko]
TOKENIZERS = ("13a", "intl", "char", "zh", "ja-mecab", "ko-mecab", "flores101", "flores200", "none")
EXTRA = {"ja-mecab": "ja", "ko-mecab": "ko"}  # sacrebleu's extra that brings the tokenizer's dictionary


def default_tokenizer(lang: str | None) -> str:
    """The tokenizer the platform scores ``lang`` targets with (``char`` for Japanese)."""
    return SACREBLEU_TOKENIZER.get(lang or "", "13a")


def read_lines(path: str | Path, role: str) -> list[str]:
    """The lines of a UTF-8 text file (``\\n`` or ``\\r\\n``), without their ends; an empty line is
    an error in a reference (``role == "reference"``)."""
    lines = Path(path).read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the final newline ends the last line
    text = []
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.removesuffix(b"\r").decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(str(path), number, "invalid UTF-8") from None
        if role == "reference" and not line.strip():
            raise InputError(str(path), number, "empty reference line (every sentence needs a reference)")
        text.append(line)
    return text


def read_pair(hypothesis: str | Path, reference: str | Path) -> tuple[list[str], list[str]]:
    """Hypothesis and reference lines, the same number of each."""
    hyp, (ref,) = read_references(hypothesis, [reference])
    return hyp, ref


def read_references(hypothesis: str | Path, references: list[str | Path]) -> tuple[list[str], list[list[str]]]:
    """Hypothesis lines and the lines of each reference (several references: sacreBLEU's
    multi-reference scores), the same number in every file."""
    hyp = read_lines(hypothesis, "hypothesis")
    refs = [read_lines(reference, "reference") for reference in references]
    for reference, ref in zip(references, refs):
        if len(hyp) != len(ref):
            raise UserError(f"{hypothesis} has {len(hyp)} lines but {reference} has {len(ref)}: one translation per "
                            "reference line")
        if not ref:
            raise InputError(str(reference), None, "no lines to score")
    return hyp, refs


# what --metrics may name: sacreBLEU's metric, its options, its name on sacrebleu's command line
METRICS = {"bleu": ("BLEU", {}, "bleu"), "chrf": ("CHRF", {}, "chrf"),
           "chrf++": ("CHRF", {"word_order": 2}, "chrf --chrf-word-order 2"), "ter": ("TER", {}, "ter")}
DEFAULT_METRICS = ("bleu", "chrf")
METRIC_KEYS = {"bleu": "bleu", "chrf": "chrf", "chrf++": "chrfpp", "ter": "ter"}  # in MLflow names ("+" is refused)


def parse_metrics(text: str) -> tuple[str, ...]:
    """``--metrics bleu,chrf,chrf++,ter``: the names, each known, none twice."""
    names = tuple(name.strip().lower() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in METRICS]
    if unknown or not names or len(set(names)) != len(names):
        raise UserError(f"--metrics {text}: a comma-separated list of {', '.join(METRICS)}, each once")
    return names


def metric_scorer(name: str, tokenize: str):
    """sacreBLEU's scorer for metric ``name`` (BLEU with ``tokenize``)."""
    import sacrebleu.metrics

    if name == "bleu":
        return bleu(tokenize)
    kind, options, _ = METRICS[name]
    return getattr(sacrebleu.metrics, kind)(**options)


def bleu(tokenize: str):
    """sacreBLEU's BLEU with ``tokenize``, or a one-line error naming the extra it needs."""
    from sacrebleu.metrics import BLEU

    try:
        return BLEU(tokenize=tokenize)
    except (ImportError, RuntimeError) as error:
        extra = EXTRA.get(tokenize)
        hint = f": pip install 'sacrebleu[{extra}]'" if extra else ""
        raise UserError(f"--tokenize {tokenize} is not available ({error}){hint}") from None


@dataclass(frozen=True)
class FileScores:
    bleu: float
    chrf: float
    signature: str  # BLEU's
    chrf_signature: str
    sentences: int

    def as_dict(self) -> dict[str, float | int]:
        return {"bleu": round(self.bleu, 4), "chrf": round(self.chrf, 4), "sentences": self.sentences}


def score(hyp: list[str], ref: list[str], tokenize: str) -> FileScores:
    scores = score_metrics(hyp, [ref], tokenize, DEFAULT_METRICS)
    return FileScores(scores["bleu"][0], scores["chrf"][0], scores["bleu"][1], scores["chrf"][1], len(ref))


def score_metrics(hyp: list[str], refs: list[list[str]], tokenize: str,
                  metrics: tuple[str, ...]) -> dict[str, tuple[float, str]]:
    """Each of ``metrics`` of ``hyp`` against the references ``refs`` (one or more): its
    sacreBLEU corpus score and signature."""
    scores = {}
    for name in metrics:
        scorer = metric_scorer(name, tokenize)
        scores[name] = (scorer.corpus_score(hyp, refs).score, str(scorer.get_signature()))
    return scores


def sacrebleu_commands(hypothesis: str | Path, reference: str | Path | list, tokenize: str,
                       baseline: str | Path | None = None, metrics: tuple[str, ...] = DEFAULT_METRICS) -> list[str]:
    """The ``sacrebleu`` command lines that recompute the scores of ``metrics`` against the
    reference(s) (and the paired tests, with ``baseline``) from the same files; chrF++ has its
    own line (sacrebleu's ``--chrf-word-order`` applies to every chrF of a command)."""

    references = reference if isinstance(reference, list) else [reference]
    ref = " ".join(shlex.quote(str(Path(path).resolve())) for path in references)
    hyp = shlex.quote(str(Path(hypothesis).resolve()))
    plain = [METRICS[name][2] for name in metrics if name != "chrf++"]
    lines = [f"sacrebleu {ref} -i {hyp} -m {' '.join(plain)} --tokenize {tokenize} -w 4"] if plain else []
    if "chrf++" in metrics:
        lines.append(f"sacrebleu {ref} -i {hyp} -m {METRICS['chrf++'][2]} -w 4")
    if baseline is not None:
        base = shlex.quote(str(Path(baseline).resolve()))
        for test, samples in (("bs", significance.BOOTSTRAP_SAMPLES), ("ar", significance.RANDOMISATION_TRIALS)):
            lines.append(f"SACREBLEU_SEED={significance.SEED} sacrebleu {ref} -i {base} {hyp} -m bleu chrf "
                         f"--tokenize {tokenize} --paired-{test} --paired-{test}-n {samples} -w 4 -f text")
    return lines


def compare(hyp: list[str], baseline: list[str], ref: list[str], tokenize: str) -> list[dict]:
    """``hyp`` against ``baseline`` (same reference): the significance table's two rows, the
    baseline first (scores, bootstrap mean ± 95% CI, p of both tests)."""

    bleu(tokenize)  # a missing tokenizer is one line, not sacrebleu's traceback
    return significance_table([{"system": "baseline"}, {"system": "hypothesis"}], [baseline, hyp], ref, tokenize)
