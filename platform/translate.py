"""``python -m platform.translate``: translate stdin to stdout with a trained model.

    python -m platform.translate --run RUN_ID < source.txt > hypotheses.txt
    python -m platform.translate --checkpoint best.pt --conllu < source.conllu > hypotheses.txt
    python -m platform.translate --run RUN_A --run RUN_B < source.txt    # an ensemble (models.ensemble)

Plain input is one sentence per line of raw text, segmented as the training data's source was
(``Trained.sentences_from_texts``: the recorded ``platform.parse`` pipeline, e.g. GiNZA for
Japanese); for data that arrived segmented, and with ``--pre-segmented``, the words are the
line's, separated by spaces.  Models that read source trees (deprel, tree2seq, hier_tree_gru)
parse plain lines with that pipeline, or need CoNLL-U input (``--conllu``; make it with
``python -m platform.parse``) where none was recorded.  Lines are translated in batches with
beam search and written detokenized, one per input line, in order.

Plain input streams, as ``fairseq-interactive`` does: it is read in chunks of at most
``--buffer-size`` lines, and a chunk is translated and its output flushed as soon as it is full or
no more input is waiting, so a terminal or a process that writes one line at a time gets each
translation back before it writes the next, and memory does not grow with the input.  A bad line
(invalid UTF-8, empty) stops the run with its line number, after the lines before it were
written.  CoNLL-U input (``--conllu``) is read whole.

With ``--nbest K`` each input line gets its K best translations (K ≤ --beam), best first, in
the Moses n-best format that rerankers read: ``LINE ||| translation ||| log_prob=LOGP ||| SCORE``
(LINE counts from 0; LOGP is log P(Y|X) with EOS; SCORE is LOGP over Wu et al.'s length penalty,
what the beam ranks by).
"""

from __future__ import annotations

import argparse
import io
import os
import select
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from platform import flags
from platform.data.conllu import read_conllu
from platform.data.parsing import PRE_SEGMENTED
from platform.errors import InputError, UserError, run_cli
from platform.flags import add_model_arguments
from platform.inference import Trained
from platform.training.metrics import UNSPACED, detokenizer


def build_parser() -> argparse.ArgumentParser:
    parser = flags.ArgumentParser(prog="python -m platform.translate", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--conllu", action="store_true",
                      help="stdin is CoNLL-U (tree models whose data recorded no segmenter need it)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    form.add_argument("--pre-segmented", action="store_true",
                        help="plain input is already segmented as the training data was (words separated by "
                             "spaces): do not run the data's segmenter on it")
    parser.add_argument("--buffer-size", type=int, default=1024, metavar="N",
                        help="plain input: translate at most N lines at a time, or fewer when no more input is "
                             "waiting (default 1024)")
    parser.add_argument("--tokenized", action="store_true", help="write tokenized output (words separated by spaces)")
    parser.add_argument("--nbest", type=int, metavar="K",
                        help="write the K best translations of each line (K ≤ --beam), Moses n-best format with scores")
    return parser


def read_conllu_input() -> list:
    raw = sys.stdin.buffer.read()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "stdin.conllu"
        path.write_bytes(raw)
        try:
            return read_conllu(path)
        except InputError as error:
            raise InputError("<stdin>", error.line, error.message) from None


def line_chunks(stream, buffer_size: int) -> Iterator[list[bytes]]:
    """The lines of a binary ``stream`` (without their ``\\n``) in chunks of at most
    ``buffer_size``: a chunk ends when full, or when no more input is waiting on the stream's file
    descriptor (a pipe or a terminal).  A stream without one (in memory) is chunked by size only."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        fd = None
    if fd is None:
        yield from _sized_chunks(stream, buffer_size)
        return
    lines: list[bytes] = []
    pending = b""
    while True:
        if lines and not select.select([fd], [], [], 0)[0]:  # nothing more waiting: translate what came
            yield lines
            lines = []
        data = os.read(fd, 1 << 16)
        if not data:
            break
        *complete, pending = (pending + data).split(b"\n")
        lines.extend(complete)
        while len(lines) >= buffer_size:
            yield lines[:buffer_size]
            lines = lines[buffer_size:]
    if pending:
        lines.append(pending)  # a last line without its newline
    if lines:
        yield lines


def _sized_chunks(stream, buffer_size: int) -> Iterator[list[bytes]]:
    lines: list[bytes] = []
    for line in stream:
        lines.append(line.removesuffix(b"\n"))
        if len(lines) == buffer_size:
            yield lines
            lines = []
    if lines:
        yield lines


def words_of(lines: list[bytes], first: int) -> list[list[str]]:
    """Each line's words (``first``: the line number of ``lines[0]``)."""
    sentences = []
    for number, line in enumerate(lines, start=first):
        try:
            words = line.decode("utf-8").split()
        except UnicodeDecodeError:
            raise InputError("<stdin>", number, "invalid UTF-8") from None
        if not words:
            raise InputError("<stdin>", number, "empty line (one sentence per line)")
        sentences.append(words)
    return sentences


def segments(trained: Trained, args) -> bool:
    """Whether plain input goes through the training data's segmenter (and parser)."""
    return trained.src_segmenter != PRE_SEGMENTED and not args.pre_segmented


def input_chunks(trained: Trained, args) -> Iterator[tuple[int, list]]:
    """``(index of the chunk's first sentence, its sentences)`` from stdin, plain lines segmented
    as the training data was (``Trained.sentences_from_texts``)."""
    if args.conllu:
        yield 0, read_conllu_input()
        return
    first, warned = 0, False
    for lines in line_chunks(sys.stdin.buffer, args.buffer_size):
        try:
            words = words_of(lines, first + 1)  # checked: UTF-8, no empty line
        except InputError as error:  # the lines before it are translated, then the run stops
            good = words_of(lines[:error.line - first - 1], first + 1)
            if good:
                yield first, sentences_of(trained, args, good)
            raise
        if not warned and not segments(trained, args) and not args.pre_segmented:
            warned = warn_if_unsegmented(trained, words)
        yield first, sentences_of(trained, args, words)
        first += len(lines)


def sentences_of(trained: Trained, args, words: list[list[str]]) -> list:
    """Lines' words as the model reads them: through the data's segmenter, or as given."""
    if segments(trained, args):
        return trained.sentences_from_texts([" ".join(line) for line in words])
    return words


def warn_if_unsegmented(trained: Trained, words: list[list[str]]) -> bool:
    """Say so (once) when a line of a language written without spaces comes as one long "word"
    to a model whose data recorded no segmenter: it is surely raw text, read as one word."""
    if trained.src_lang not in UNSPACED or not any(len(line) == 1 and len(line[0]) > 15 for line in words):
        return False
    print(f"warning: a {trained.src_lang} line without spaces, but this model's data recorded no segmenter (its "
          "CoNLL-U came segmented): give input segmented as the training data was, or it is read as one word",
          file=sys.stderr)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    from platform.tracking.store import resolve_tracking_uri  # MLflow: heavy, only for --run (not a file or stdin)

    args = build_parser().parse_args(argv)
    trained = Trained.load_all(run_ids=args.run, checkpoints=args.checkpoint,
                               tracking_uri=resolve_tracking_uri(args.tracking_uri) if args.run else None,
                               device=args.device, average_last=args.average_last)  # a --checkpoint needs no MLflow
    if trained.needs_trees and not args.conllu and not segments(trained, args):
        why = ("with --pre-segmented" if args.pre_segmented
               else "and its data recorded no segmenter to parse plain text with")
        raise UserError(f"{trained.config.model.name} reads source trees {why}: give CoNLL-U on stdin with "
                        "--conllu (python -m platform.parse makes it from raw text)")
    beam = trained.decoding(args.beam).beam
    if args.nbest is not None and not 1 <= args.nbest <= beam:
        raise UserError(f"--nbest {args.nbest} needs --beam ≥ {args.nbest} (beam search keeps --beam hypotheses; "
                        f"this run decodes with beam {beam})")
    if args.buffer_size < 1:
        raise UserError(f"--buffer-size {args.buffer_size}: at least 1 line")
    for first, sentences in input_chunks(trained, args):
        if args.nbest is None:
            translations = trained.translate_all(sentences, args.beam, args.lenpen, args.batch_size, args.tokenized,
                                                 args.device)
            sys.stdout.write("".join(text + "\n" for text in translations))
        else:
            sys.stdout.write(nbest_lines(trained, sentences, first, args))
        sys.stdout.flush()
    return 0


def nbest_lines(trained: Trained, sentences: list, first: int, args) -> str:
    """The Moses n-best lines of ``sentences`` (numbered from ``first``), in input order."""
    detok = (lambda text: text) if args.tokenized else detokenizer(trained.tgt_lang)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))  # similar lengths per batch
    outputs: dict[int, str] = {}
    for start in range(0, len(order), args.batch_size):
        chunk = order[start:start + args.batch_size]
        src = trained.source_batch([sentences[i] for i in chunk]).to(args.device)
        for index, found in zip(chunk, trained.translate_nbest(src, args.beam, args.lenpen, args.nbest)):
            outputs[index] = "".join(f"{first + index} ||| {detok(text)} ||| log_prob={log_prob:.4f} ||| "
                                     f"{score:.4f}\n" for text, score, log_prob in found)
    return "".join(outputs[i] for i in range(len(sentences)))


if __name__ == "__main__":
    run_cli(main, data_on_stdout=True)
