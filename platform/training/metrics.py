"""Translation and parsing metrics (docs/architecture.md).

* ``dev_bleu`` / ``dev_chrf``: sacrebleu on *detokenized* text (Moses detokenizer for
  languages written with spaces, characters joined for Japanese/Chinese), the signature kept;
* ``dev_bleu_tok``: BLEU on the tokenized text with ``tokenize="none"``, the way the papers
  report it;
* UAS of the DBSA parse heads: argmax against the reference heads over supervised positions.

``SHOWN`` says how each metric is displayed: the per-epoch console line, the sweep summary
and ``platform.report`` all read it, so a new metric is one entry here (next to its code).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

import torch


@dataclass(frozen=True)
class Shown:
    """How a metric is displayed: its number format, whether the per-epoch console line has it,
    which panel of the learning curves plots it (``loss``, or ``scores`` with its scale), and how
    sweep summaries and reports take it from a run (``best``: the maximum over epochs; ``last``:
    the latest value; None: not shown there)."""

    fmt: str
    progress: bool = False
    curve: Literal["loss", "scores"] | None = None
    curve_scale: float = 1.0  # UAS in [0, 1] is drawn ×100 beside BLEU/chrF
    summary: Literal["best", "last"] | None = None

    def format(self, value: float) -> str:
        return format(value, self.fmt)


SHOWN = {
    "train_loss": Shown(".2f", progress=True, curve="loss"),
    "dev_loss": Shown(".2f", progress=True, curve="loss"),
    "dev_bleu": Shown(".2f", progress=True, curve="scores", summary="best"),
    "dev_chrf": Shown(".2f", progress=True, curve="scores", summary="best"),
    "dev_bleu_tok": Shown(".2f", curve="scores"),
    "dev_uas_enc": Shown(".3f", progress=True, curve="scores", curve_scale=100.0, summary="best"),
    "dev_uas_dec": Shown(".3f", progress=True, curve="scores", curve_scale=100.0, summary="best"),
    "tokens_per_s": Shown(".0f", progress=True, summary="last"),
    "test_bleu": Shown(".2f", summary="last"),
    "test_chrf": Shown(".2f", summary="last"),
    "test_bleu_tok": Shown(".2f", summary="last"),
    "test_uas_enc": Shown(".3f", summary="last"),
    "test_uas_dec": Shown(".3f", summary="last"),
    "num_parameters": Shown(".0f", summary="last"),
}


def shown(where: Literal["progress", "loss", "scores", "best", "last"]) -> list[str]:
    """The metrics of the console line (``progress``), of a learning-curve panel (``loss``,
    ``scores``), or those summarised as ``best`` / ``last``."""
    if where == "progress":
        return [name for name, how in SHOWN.items() if how.progress]
    if where in ("loss", "scores"):
        return [name for name, how in SHOWN.items() if how.curve == where]
    return [name for name, how in SHOWN.items() if how.summary == where]


UNSPACED = {"ja", "zh", "th"}  # written without spaces between words
SACREBLEU_TOKENIZER = {"ja": "char", "zh": "zh", "th": "char"}


def keeps_tokens(lang: str) -> bool:
    """Synthetic or unknown languages (not an ISO 639-1 code): their "detokenized" text keeps
    the tokens, since no detokenizer knows their punctuation rules."""
    return lang not in UNSPACED and len(lang) != 2


@cache
def detokenizer(lang: str) -> Callable[[str], str]:
    """Tokenized text (words separated by spaces) → running text in ``lang``."""
    if lang in UNSPACED:
        return lambda text: "".join(text.split())
    if not keeps_tokens(lang):  # an ISO 639-1 code: Moses knows its punctuation rules
        from sacremoses import MosesDetokenizer

        moses = MosesDetokenizer(lang=lang)
        return lambda text: moses.detokenize(text.split())
    return lambda text: " ".join(text.split())  # synthetic or unknown languages: keep the words


@dataclass(frozen=True)
class TranslationScores:
    bleu: float
    chrf: float
    bleu_tok: float
    signature: str  # of the detokenized BLEU

    def as_metrics(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_bleu": self.bleu, f"{prefix}_chrf": self.chrf, f"{prefix}_bleu_tok": self.bleu_tok}


def translation_scores(hypotheses: Sequence[str], references: Sequence[str], lang: str) -> TranslationScores:
    """Scores of tokenized hypotheses against tokenized references (both words separated by spaces)."""
    import sacrebleu

    detok = detokenizer(lang)
    hyp_text = [detok(h) for h in hypotheses]
    ref_text = [detok(r) for r in references]
    # force: sacrebleu's "forgot to detokenize?" warning would fire on every evaluation of a
    # synthetic corpus although nothing was forgotten
    bleu = sacrebleu.BLEU(tokenize=SACREBLEU_TOKENIZER.get(lang, "13a"), force=keeps_tokens(lang))
    detok_bleu = bleu.corpus_score(hyp_text, [ref_text])
    chrf = sacrebleu.CHRF().corpus_score(hyp_text, [ref_text])
    tok_bleu = sacrebleu.BLEU(tokenize="none", force=True).corpus_score(list(hypotheses), [list(references)])
    return TranslationScores(bleu=detok_bleu.score, chrf=chrf.score, bleu_tok=tok_bleu.score,
                             signature=str(bleu.get_signature()))


def sacrebleu_commands(lang: str, hyp: str, ref: str, tok_hyp: str, tok_ref: str) -> list[str]:
    """The ``sacrebleu`` command lines that recompute ``translation_scores`` from the files
    ``platform.evaluate`` writes: BLEU and chrF on the detokenized text, BLEU on the tokenized."""
    import shlex

    force = " --force" if keeps_tokens(lang) else ""
    tokenize = SACREBLEU_TOKENIZER.get(lang, "13a")
    return [f"sacrebleu {shlex.quote(ref)} -i {shlex.quote(hyp)} -m bleu chrf --tokenize {tokenize}{force} -w 4",
            f"sacrebleu {shlex.quote(tok_ref)} -i {shlex.quote(tok_hyp)} -m bleu --tokenize none --force -w 4"]


def head_accuracy(logprobs: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> tuple[int, int]:
    """(correct, counted) of argmax heads: logprobs [B, L, L], targets [B, L] (ignore_index = skip)."""
    counted = targets != ignore_index
    correct = (logprobs.argmax(dim=-1) == targets) & counted
    return int(correct.sum()), int(counted.sum())
