"""``python -m platform.evaluate``: score a trained model on any CoNLL-U pair set.

    python -m platform.evaluate --run RUN_ID --test ../shared/data/tanaka-enja/test --src ja --tgt en
    python -m platform.evaluate --checkpoint runs/.../checkpoint.pt --test corpus/test --src ja --tgt en --beam 4

The test pairs are encoded with the run's own subword models and settings, decoded with beam
search (beam 4, length penalty α 0.6 by default) and scored: ``test_bleu``, ``test_chrf``
(sacrebleu, detokenized), ``test_bleu_tok`` (tokenized, as the papers report), and for DBSA
``test_uas_enc`` / ``test_uas_dec`` against the set's own trees.  Hypotheses and references are
written next to ``--out`` (``OUT.hyp``, ``OUT.ref`` detokenized; ``OUT.tok.hyp``, ``OUT.tok.ref``
tokenized); with ``--run`` the metrics and files are also logged to that MLflow run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from platform.errors import run_cli
from platform.inference import Trained, add_model_arguments
from platform.metrics import detokenizer
from platform.training import Context, evaluate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m platform.evaluate", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    parser.add_argument("--test", required=True, metavar="PREFIX", help="PREFIX.SRC.conllu[.gz] and PREFIX.TGT.conllu[.gz]")
    parser.add_argument("--src", required=True, help="source language suffix")
    parser.add_argument("--tgt", required=True, help="target language suffix")
    parser.add_argument("--out", metavar="PREFIX", help="where to write hypotheses/references (default: test name in cwd)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from platform import tracking

    args = build_parser().parse_args(argv)
    tracking_uri = tracking.resolve_tracking_uri(args.tracking_uri) if args.run else None  # --checkpoint: no MLflow
    trained = Trained.load(run_id=args.run, checkpoint=args.checkpoint, tracking_uri=tracking_uri, device=args.device)
    trained.check_languages(args.src, args.tgt)
    with tempfile.TemporaryDirectory() as scratch:
        examples = trained.encode_pairs(args.test, scratch)
        config = dataclasses.replace(trained.config, eval=dataclasses.replace(
            trained.config.eval, beam=args.beam, alpha=args.lenpen, max_sentences=None))
        result = evaluate(trained.model, examples, config, trained.tgt_model, trained.tgt_lang,
                          Context(device=torch.device(args.device)), prefix="test")
    out = Path(args.out or Path(args.test).name)
    files = write_outputs(out, result.hypotheses, examples.texts["tgt_text"], trained.tgt_lang)
    print(json.dumps({k: round(v, 4) for k, v in result.metrics.items()}, indent=1))
    print(f"signature: {result.signature}", file=sys.stderr)
    print("wrote " + ", ".join(str(f) for f in files), file=sys.stderr)
    if args.run:
        logger = tracking.RunLogger(tracking_uri, args.run, reopen=False)
        logger.metrics(result.metrics, step=0)
        logger.tag("test_sacrebleu_signature", result.signature)
        for path in files:
            logger.artifact(path, f"test/{Path(args.test).name}")
    return 0


def write_outputs(out: Path, hypotheses: list[str], references: list[str], lang: str) -> list[Path]:
    detok = detokenizer(lang)
    files = {
        out.with_name(out.name + ".hyp"): [detok(h) for h in hypotheses],
        out.with_name(out.name + ".ref"): [detok(r) for r in references],
        out.with_name(out.name + ".tok.hyp"): hypotheses,
        out.with_name(out.name + ".tok.ref"): list(references),
    }
    temporary = {path: path.with_name(f".{path.name}.tmp") for path in files}
    try:  # all four files or none: written aside, then renamed
        for path, lines in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary[path].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        for path, tmp in temporary.items():
            os.replace(tmp, path)
    finally:
        for tmp in temporary.values():
            if tmp.is_file():
                tmp.unlink()
    return list(files)


if __name__ == "__main__":
    run_cli(main)
