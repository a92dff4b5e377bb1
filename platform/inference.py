"""A trained model ready to use: loaded from an MLflow run or a checkpoint file, with the subword
models and prepare settings it was trained with (all inside the checkpoint); translating with
it, scoring it on a CoNLL-U pair set, and writing the outputs.  ``platform.evaluate``,
``platform.translate``, ``platform.serving``, a sweep's confirmation and ``benchmarks/study.py``
use it; its flags are ``platform.flags.add_model_arguments``, a run's files in MLflow
``tracking.run_files``."""

from __future__ import annotations

import dataclasses
import shlex
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from models import MODELS
from models.ensemble import Ensemble
from models.inputs import Source
from models.search import beam_search, best_hypotheses
from platform import atomic, config_io
from platform.data.conllu import Sentence
from platform.data.encode import PrepareConfig, encode_table, side_columns
from platform.data.examples import ParquetExamples, pad, pad_tree_parents
from platform.data.parsing import PRE_SEGMENTED
from platform.data.sources import source_sentences
from platform.data.subwords import SubwordModel
from platform.errors import UserError
from platform.scoring import DEFAULT_METRICS, METRIC_KEYS, default_tokenizer, read_references, score_metrics
from platform.scoring import sacrebleu_commands as scoring_commands
from platform.tracking.run_files import fetch_checkpoint, fetch_kept
from platform.training.averaging import average, kept_files, kept_weights
from platform.training.checkpoint import (
    IncompatibleCheckpoint,
    load_checkpoint,
    load_weights,
    model_from_checkpoint,
    subword_models_from_checkpoint,
)
from platform.training.config import DecodeConfig, TrainConfig
from platform.training.context import Context
from platform.training.evaluate import Evaluation, evaluate
from platform.training.metrics import detokenizer, sacrebleu_commands
from platform.training.retention import LAST, LEGACY_LAST


def averaged_weights(count: int, *, run_id: str | None, checkpoint: Path, tracking_uri: str | None) -> dict:
    """The mean of the last ``count`` checkpoints' weights a training kept (``last_checkpoints``:
    an MLflow run's artifacts, or the directory beside a ``--checkpoint``, as ``LocalHooks``
    writes it)."""
    if run_id is not None:
        with tempfile.TemporaryDirectory(prefix="nmt-avg-") as scratch:  # the run's copies go once averaged
            return _average_kept(fetch_kept(run_id, tracking_uri, scratch), count, f"MLflow run {run_id}")
    folders = (checkpoint.parent, checkpoint.parent.parent, checkpoint.parent.parent / "kept")  # a Ray run's: kept/
    beside = [d / kind for d in folders for kind in (LAST, LEGACY_LAST) if kept_files(d / kind)]
    directory = beside[0] if beside else checkpoint.parent / LAST
    return _average_kept(directory, count, str(directory))


def _average_kept(directory: Path, count: int, where: str) -> dict:
    files = kept_files(directory)
    if count < 1 or len(files) < count:
        raise UserError(f"--average-last {count}: {where} kept the weights of {len(files)} checkpoint(s) "
                        f"(train with --average-last {max(count, 1)} or more)")
    return average([kept_weights(path) for path in files[-count:]])


def checkpoint_load_error(error: Exception) -> str:
    """torch's many-line refusal as one line."""
    text = str(error)
    if "Weights only load failed" in text:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        detail = next((line for line in lines if line.startswith("Unsupported") or "GLOBAL" in line), "")
        refused = "it holds more than tensors and plain containers, so it was refused unread"
        return refused + (f": {detail}" if detail else "")
    return " ".join(text.split())[:300] or type(error).__name__


@dataclass
class Trained:
    model: torch.nn.Module
    config: TrainConfig
    prepare: PrepareConfig
    src_model: SubwordModel
    tgt_model: SubwordModel
    src_lang: str
    tgt_lang: str
    src_segmenter: dict | str = "pre-segmented"  # how the training data's source was segmented (data.parsing)
    reads_trees: bool | None = None  # an ensemble's: whether any member reads source trees

    @classmethod
    def load(cls, *, run_id: str | None = None, checkpoint: str | Path | None = None, tracking_uri: str | None = None,
             device: str = "cpu", average_last: int | None = None) -> Trained:
        """The best checkpoint of ``run_id`` (or ``checkpoint``); with ``average_last`` N, its
        weights replaced by the average of the last N checkpoints' (``training.averaging``)."""
        if (run_id is None) == (checkpoint is None):
            raise UserError("give exactly one of --run and --checkpoint")
        if run_id is None:
            return cls._load(Path(checkpoint), run_id, tracking_uri, device, average_last)
        with tempfile.TemporaryDirectory(prefix="nmt-ckpt-") as scratch:  # the run's copy goes once loaded
            fetched = fetch_checkpoint(run_id, tracking_uri, scratch)
            return cls._load(fetched, run_id, tracking_uri, device, average_last)

    @classmethod
    def _load(cls, checkpoint: Path, run_id: str | None, tracking_uri: str | None, device: str,
              average_last: int | None) -> Trained:
        if not Path(checkpoint).exists():
            raise UserError(f"{checkpoint}: checkpoint not found")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's notes on pickle protocols: the error says it all
                state = load_checkpoint(checkpoint)  # on the CPU: the model alone moves to ``device``
        except IncompatibleCheckpoint as error:  # of another format: it names the file
            raise UserError(f"the best checkpoint of MLflow run {run_id}: {str(error).removeprefix(f'{checkpoint}: ')}"
                            if run_id else str(error)) from None
        except Exception as error:  # noqa: BLE001 - whatever torch refused, said in one line
            raise UserError(f"{checkpoint}: not a checkpoint this code can load "
                            f"({checkpoint_load_error(error)})") from None
        try:
            model, config = model_from_checkpoint(state, device)
        except IncompatibleCheckpoint as error:  # say which file: a --run's is a temporary copy
            where = f"the best checkpoint of MLflow run {run_id}" if run_id else str(checkpoint)
            raise UserError(f"{where}: {error}") from None
        if average_last is not None:
            averaged = averaged_weights(average_last, run_id=run_id, checkpoint=Path(checkpoint),
                                        tracking_uri=tracking_uri)
            load_weights(model, {name: value.to(device) for name, value in averaged.items()}, "the averaged weights")
        subwords = subword_models_from_checkpoint(state)
        meta = state["dataset_meta"]
        prepare = config_io.from_dict(PrepareConfig, meta["config"])
        return cls(model, config, prepare, subwords["src"], subwords["tgt"], meta["src_lang"], meta["tgt_lang"],
                   meta.get("segmentation", {}).get("src", PRE_SEGMENTED))

    @classmethod
    def load_all(cls, *, run_ids: list[str] | None = None, checkpoints: list[str] | None = None,
                 tracking_uri: str | None = None, device: str = "cpu", average_last: int | None = None) -> Trained:
        """``load`` for one run or checkpoint; for several, an ensemble (``models.ensemble``) that
        decodes and scores as one model, with the first's decoding and settings.  Its members
        must have been trained on the same data preparation (the same languages, subword models
        and settings); each may be any architecture."""
        given = [(run, None) for run in run_ids or []] + [(None, path) for path in checkpoints or []]
        if len(given) <= 1:
            run_id, checkpoint = given[0] if given else (None, None)
            return cls.load(run_id=run_id, checkpoint=checkpoint, tracking_uri=tracking_uri, device=device,
                            average_last=average_last)
        if average_last is not None:
            raise UserError("--average-last averages one run's checkpoints: give one --run or --checkpoint with it")
        members = [cls.load(run_id=run_id, checkpoint=checkpoint, tracking_uri=tracking_uri, device=device)
                   for run_id, checkpoint in given]
        for (run_id, checkpoint), member in zip(given[1:], members[1:]):
            if (reason := members[0].incompatible(member)) is not None:
                name = f"MLflow run {run_id}" if run_id else str(checkpoint)
                raise UserError(f"{name} cannot join an ensemble with {given[0][0] or given[0][1]}: {reason}")
        return dataclasses.replace(members[0], model=Ensemble([member.model for member in members]),
                                   reads_trees=any(member.needs_trees for member in members))

    def incompatible(self, other: Trained) -> str | None:
        """Why ``other`` cannot decode together with this model (None: it can)."""
        if (other.src_lang, other.tgt_lang) != (self.src_lang, self.tgt_lang):
            return f"it translates {other.src_lang}->{other.tgt_lang}, not {self.src_lang}->{self.tgt_lang}"
        for side, mine, theirs in (("source", self.src_model, other.src_model),
                                   ("target", self.tgt_model, other.tgt_model)):
            if mine.processor.serialized_model_proto() != theirs.processor.serialized_model_proto():
                return f"its {side} vocabulary (subword model) differs: it was trained on other prepared data"
        if other.prepare != self.prepare:
            return "its data was prepared with other settings"
        return None

    @property
    def needs_trees(self) -> bool:
        if self.reads_trees is not None:  # an ensemble: any member that reads trees
            return self.reads_trees
        return MODELS[self.config.model.name].source_syntax is not None

    def check_languages(self, src: str, tgt: str | None = None) -> None:
        if src != self.src_lang or (tgt is not None and tgt != self.tgt_lang):
            raise UserError(f"the model translates {self.src_lang}->{self.tgt_lang}, not {src}->{tgt or '?'}")

    def encode_pairs(self, prefix: str) -> ParquetExamples:
        """A CoNLL-U pair set encoded exactly like the training data (nothing filtered)."""
        table = encode_table(prefix, (self.src_model, self.tgt_model), self.prepare)
        return ParquetExamples(table, name=str(prefix))

    def decoding(self, beam: int | None = None, alpha: float | None = None) -> DecodeConfig:
        """How this model decodes: its run's recipe's decoding (``config.decode``), with ``beam``
        and ``alpha`` where given."""
        decode = self.config.decode
        return dataclasses.replace(decode, beam=decode.beam if beam is None else beam,
                                   alpha=decode.alpha if alpha is None else alpha)

    def score(self, prefix: str, beam: int | None = None, alpha: float | None = None, device: str = "cpu",
              metric_prefix: str = "test", metrics: tuple[str, ...] = DEFAULT_METRICS) -> tuple[Evaluation, list[str]]:
        """Decode (``decoding``) and score a CoNLL-U pair set: test_bleu, test_chrf, test_bleu_tok,
        parse UAS (``metric_prefix`` instead of ``test``), and chrF++ (``test_chrfpp``) and TER
        (``test_ter``) where ``metrics`` names them; returns the evaluation and the (tokenized)
        references."""
        return self.score_examples(self.encode_pairs(prefix), beam, alpha, device, metric_prefix, metrics)

    def score_examples(self, examples: ParquetExamples, beam: int | None = None, alpha: float | None = None,
                       device: str = "cpu", metric_prefix: str = "test",
                       metrics: tuple[str, ...] = DEFAULT_METRICS) -> tuple[Evaluation, list[str]]:
        """``score`` of encoded examples (a prepared dataset's test split, for one)."""
        decode = self.decoding(beam, alpha)
        config = dataclasses.replace(self.config, eval=dataclasses.replace(
            self.config.eval, beam=decode.beam, alpha=decode.alpha, max_len_a=decode.max_len_a,
            max_len_b=decode.max_len_b, max_sentences=None))
        result = evaluate(self.model, examples, config, self.tgt_model, self.tgt_lang,
                          Context(device=torch.device(device)), prefix=metric_prefix)
        references = list(examples.texts["tgt_text"])
        extra = tuple(name for name in metrics if name not in DEFAULT_METRICS)  # BLEU and chrF: evaluate's own
        if extra:  # on the detokenized text, as written to OUT.hyp/OUT.ref (write_outputs)
            detok = detokenizer(self.tgt_lang)
            scores = score_metrics([detok(h) for h in result.hypotheses], [[detok(r) for r in references]],
                                   default_tokenizer(self.tgt_lang), extra)
            result.metrics.update({f"{metric_prefix}_{METRIC_KEYS[name]}": value
                                   for name, (value, _) in scores.items()})
        return result, references

    def score_text(self, source: str | Path, references: list[str | Path], metrics: tuple[str, ...] = DEFAULT_METRICS,
                   beam: int | None = None, alpha: float | None = None, device: str = "cpu",
                   metric_prefix: str = "test") -> Evaluation:
        """A plain-text test set: ``source`` (one sentence per line, read as ``sentences_from_texts``
        says: segmented, and parsed for a tree model, as the training data's source was)
        translated and scored against ``references`` (one or several files, line by line) with
        sacreBLEU's ``metrics`` (BLEU with the target language's tokenizer); its hypotheses are
        detokenized."""
        texts, refs = read_references(source, references)
        hypotheses = self.translate_all(self.sentences_from_texts(texts), beam, alpha, device=device)
        scores = score_metrics(hypotheses, refs, default_tokenizer(self.tgt_lang), metrics)
        signature = scores["bleu"][1] if "bleu" in scores else next(iter(scores.values()))[1]
        return Evaluation({f"{metric_prefix}_{METRIC_KEYS[name]}": value for name, (value, _) in scores.items()},
                          hypotheses, signature)

    def source_batch(self, sentences: list[Sentence] | list[list[str]]) -> Source:
        """Sentences with trees (CoNLL-U) or plain word lists → a padded Source."""
        words = [s.words if isinstance(s, Sentence) else s for s in sentences]
        encoded = self.src_model.encode_sentences(words)
        ids = [e[0] for e in encoded]
        lengths = torch.tensor([len(i) for i in ids])
        if not all(isinstance(s, Sentence) for s in sentences):
            return Source(ids=pad(ids, 0), lengths=lengths)
        rows = [side_columns("src", s, i, w, self.prepare.subword_head) for s, (i, w) in zip(sentences, encoded)]
        return Source(ids=pad(ids, 0), lengths=lengths, depth=pad([r["src_depth"] for r in rows], 0),
                      tree_parent=pad_tree_parents([r["src_tree_parent"] for r in rows], int(lengths.max())))

    @torch.no_grad()
    def translate(self, src: Source, beam: int | None = None, alpha: float | None = None) -> list[str]:
        """Tokenized translations (words separated by spaces), decoded as ``decoding`` says."""
        decode = self.decoding(beam, alpha)
        hypotheses = best_hypotheses(self.model, src, beam=decode.beam, alpha=decode.alpha,
                                     max_len_a=decode.max_len_a, max_len_b=decode.max_len_b)
        return [self.tgt_model.decode(h.tokens) for h in hypotheses]

    def translate_all(self, sentences: list, beam: int | None = None, alpha: float | None = None,
                      batch_size: int = 64, tokenized: bool = False, device: str = "cpu") -> list[str]:
        """Translations of ``sentences`` (CoNLL-U ``Sentence``s or word lists) in their order,
        decoded in batches of similar lengths; detokenized unless ``tokenized``."""
        detok = (lambda text: text) if tokenized else detokenizer(self.tgt_lang)
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))  # similar lengths per batch
        outputs: dict[int, str] = {}
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            src = self.source_batch([sentences[i] for i in chunk]).to(device)
            for index, text in zip(chunk, self.translate(src, beam, alpha)):
                outputs[index] = detok(text)
        return [outputs[i] for i in range(len(sentences))]

    def sentences_from_texts(self, texts: list[str], pre_segmented: bool = False) -> list:
        """Each text as the model reads it: a CoNLL-U block (a line with tabs), or plain text,
        segmented as the training data's source was (``src_segmenter``; with ``pre_segmented``,
        or for data that arrived segmented, words separated by spaces), and parsed where the
        model reads trees (``data.sources``)."""
        segmenter = None if pre_segmented or self.src_segmenter == PRE_SEGMENTED else self.src_segmenter
        return source_sentences(texts, self.src_lang, self.needs_trees, self.config.model.name, segmenter)

    @torch.no_grad()
    def translate_nbest(self, src: Source, beam: int | None, alpha: float | None,
                        nbest: int) -> list[list[tuple[str, float, float]]]:
        """Each sentence's ``nbest`` best translations (needs ``nbest ≤ beam``), best first, as
        (tokenized text, score with the length penalty, log P(Y|X) with EOS)."""
        decode = self.decoding(beam, alpha)
        if not 1 <= nbest <= decode.beam:
            raise ValueError(f"nbest {nbest} needs beam ≥ {nbest}")
        found = beam_search(self.model, src, beam=decode.beam, alpha=decode.alpha, max_len_a=decode.max_len_a,
                            max_len_b=decode.max_len_b)
        return [[(self.tgt_model.decode(h.tokens), h.score, h.log_prob) for h in hypotheses[:nbest]]
                for hypotheses in found]


def write_outputs(out: Path, hypotheses: list[str], references: list[str], lang: str,
                  metrics: tuple[str, ...] = DEFAULT_METRICS) -> list[Path]:
    """``OUT.hyp``/``OUT.ref`` detokenized, ``OUT.tok.hyp``/``OUT.tok.ref`` tokenized, and
    ``OUT.sacrebleu.sh``, the sacrebleu commands that recompute the scores from them (run in
    the directory of OUT; chrF++ and TER where ``metrics`` names them): all five or none."""
    detok = detokenizer(lang)
    names = {kind: out.with_name(f"{out.name}.{kind}") for kind in ("hyp", "ref", "tok.hyp", "tok.ref", "sacrebleu.sh")}
    files = {
        names["hyp"]: [detok(h) for h in hypotheses],
        names["ref"]: [detok(r) for r in references],
        names["tok.hyp"]: hypotheses,
        names["tok.ref"]: list(references),
        names["sacrebleu.sh"]: ["# the scores of platform.evaluate, recomputed (run in this directory)",
                                *sacrebleu_commands(lang, *(names[kind].name
                                                            for kind in ("hyp", "ref", "tok.hyp", "tok.ref"))),
                                *_extra_commands(names["hyp"], names["ref"], lang, metrics)],
    }
    return atomic.write_texts({path: "".join(line + "\n" for line in lines) for path, lines in files.items()})


def _extra_commands(hyp: Path, ref: Path, lang: str, metrics: tuple[str, ...]) -> list[str]:
    """The sacrebleu lines of the ``metrics`` beyond BLEU and chrF (chrF++, TER), on the
    detokenized files named as in the script's directory."""
    extra = tuple(name for name in metrics if name not in DEFAULT_METRICS)
    if not extra:
        return []
    lines = scoring_commands(hyp, ref, default_tokenizer(lang), metrics=extra)
    return [line.replace(shlex.quote(str(hyp.resolve())), shlex.quote(hyp.name))
            .replace(shlex.quote(str(ref.resolve())), shlex.quote(ref.name)) for line in lines]


def write_text_outputs(out: Path, evaluation: Evaluation, source: str | Path, references: list[str | Path],
                       lang: str, metrics: tuple[str, ...]) -> list[Path]:
    """``OUT.hyp`` (detokenized translations of a plain-text test set) and ``OUT.sacrebleu.sh``,
    the sacrebleu commands that recompute ``score_text``'s scores from it and the references."""
    hyp, script = out.with_name(f"{out.name}.hyp"), out.with_name(f"{out.name}.sacrebleu.sh")
    commands = scoring_commands(hyp, [Path(r) for r in references], default_tokenizer(lang), metrics=metrics)
    texts = {hyp: "".join(line + "\n" for line in evaluation.hypotheses),
             script: "".join(line + "\n" for line in [f"# platform.evaluate --test-text {source}, recomputed",
                                                        *commands])}
    return atomic.write_texts(texts)
