"""``python -m platform.translate``: translate stdin to stdout with a trained model.

    python -m platform.translate --run RUN_ID < source.txt > hypotheses.txt
    python -m platform.translate --checkpoint best.pt --conllu < source.conllu > hypotheses.txt

Plain input is one sentence per line, words separated by spaces (segmented as the training
data was).  Models that read source trees (deprel, tree2seq, hier_tree_gru) need CoNLL-U input
(``--conllu``; make it with ``python -m platform.parse``).  Lines are translated in batches with
beam search and written detokenized, one per input line, in order.

With ``--nbest K`` each input line gets its K best translations (K ≤ --beam), best first, in
the Moses n-best format that rerankers read: ``LINE ||| translation ||| log_prob=LOGP ||| SCORE``
(LINE counts from 0; LOGP is log P(Y|X) with EOS; SCORE is LOGP over Wu et al.'s length penalty,
what the beam ranks by).
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from platform.data.conllu import read_conllu
from platform.errors import InputError, UserError, run_cli
from platform.flags import add_model_arguments
from platform.inference import Trained
from platform.training.metrics import detokenizer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m platform.translate", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    parser.add_argument("--conllu", action="store_true", help="stdin is CoNLL-U (needed by tree models)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    parser.add_argument("--tokenized", action="store_true", help="write tokenized output (words separated by spaces)")
    parser.add_argument("--nbest", type=int, metavar="K",
                        help="write the K best translations of each line (K ≤ --beam), Moses n-best format with scores")
    return parser


def read_input(conllu: bool) -> list:
    raw = sys.stdin.buffer.read()
    if conllu:
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "stdin.conllu"
            path.write_bytes(raw)
            try:
                return read_conllu(path)
            except InputError as error:
                raise InputError("<stdin>", error.line, error.message) from None
    sentences = []
    for number, line in enumerate(io.BytesIO(raw), start=1):
        try:
            words = line.decode("utf-8").split()
        except UnicodeDecodeError:
            raise InputError("<stdin>", number, "invalid UTF-8") from None
        if not words:
            raise InputError("<stdin>", number, "empty line (one sentence per line)")
        sentences.append(words)
    return sentences


def main(argv: Sequence[str] | None = None) -> int:
    from platform.tracking.store import resolve_tracking_uri

    args = build_parser().parse_args(argv)
    trained = Trained.load(run_id=args.run, checkpoint=args.checkpoint,
                           tracking_uri=resolve_tracking_uri(args.tracking_uri) if args.run else None,
                           device=args.device, average_last=args.average_last)  # a --checkpoint needs no MLflow
    if trained.needs_trees and not args.conllu:
        raise UserError(f"{trained.config.model.name} reads source trees: give CoNLL-U on stdin with --conllu "
                        "(python -m platform.parse makes it from raw text)")
    beam = trained.decoding(args.beam).beam
    if args.nbest is not None and not 1 <= args.nbest <= beam:
        raise UserError(f"--nbest {args.nbest} needs --beam ≥ {args.nbest} (beam search keeps --beam hypotheses; "
                        f"this run decodes with beam {beam})")
    sentences = read_input(args.conllu)
    if args.nbest is None:
        translations = trained.translate_all(sentences, args.beam, args.lenpen, args.batch_size, args.tokenized,
                                             args.device)
        sys.stdout.write("".join(text + "\n" for text in translations))
        return 0
    detok = (lambda text: text) if args.tokenized else detokenizer(trained.tgt_lang)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))  # similar lengths per batch
    outputs: dict[int, str] = {}
    for start in range(0, len(order), args.batch_size):
        chunk = order[start:start + args.batch_size]
        src = trained.source_batch([sentences[i] for i in chunk]).to(args.device)
        for index, found in zip(chunk, trained.translate_nbest(src, args.beam, args.lenpen, args.nbest)):
            outputs[index] = "".join(f"{index} ||| {detok(text)} ||| log_prob={log_prob:.4f} ||| {score:.4f}\n"
                                     for text, score, log_prob in found)
    sys.stdout.write("".join(outputs[i] for i in range(len(sentences))))
    return 0


if __name__ == "__main__":
    run_cli(main)
