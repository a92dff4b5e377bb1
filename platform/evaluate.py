"""``python -m platform.evaluate``: score a trained model on any CoNLL-U pair set.

    python -m platform.evaluate --run RUN_ID --test corpus/test --src ja --tgt en
    python -m platform.evaluate --checkpoint runs/.../checkpoint.pt --test corpus/test --src ja --tgt en --beam 4

The test pairs are encoded with the run's own subword models and settings, decoded with beam
search (the run's recipe's decoding by default: e.g. beam 4, α 0.6 for Deguchi et al.) and
scored: ``test_bleu``, ``test_chrf`` (sacrebleu, detokenized), ``test_bleu_tok`` (tokenized, as
the papers report), and for DBSA ``test_uas_enc`` / ``test_uas_dec`` against the set's own trees.
Hypotheses and references are written next to ``--out`` (``OUT.hyp``, ``OUT.ref`` detokenized;
``OUT.tok.hyp``, ``OUT.tok.ref`` tokenized), with ``OUT.sacrebleu.sh``, the sacrebleu command
lines that reproduce the scores; with ``--run`` the metrics and files are also logged to that
MLflow run.  ``--average-last N`` evaluates the average of the last N epochs' weights instead of
the best checkpoint (Vaswani et al. average the last 5), as ``test_avgN_bleu``, ... (files under
``test_avgN/``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from platform.errors import run_cli
from platform.flags import add_model_arguments
from platform.inference import Trained, write_outputs
from platform.tracking.run_files import log_test_results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m platform.evaluate", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    parser.add_argument("--test", required=True, metavar="PREFIX",
                        help="PREFIX.SRC.conllu[.gz] and PREFIX.TGT.conllu[.gz]")
    parser.add_argument("--src", required=True, help="source language suffix")
    parser.add_argument("--tgt", required=True, help="target language suffix")
    parser.add_argument("--out", metavar="PREFIX",
                        help="where to write hypotheses/references (default: test name in cwd)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from platform.tracking.store import resolve_tracking_uri

    args = build_parser().parse_args(argv)
    tracking_uri = resolve_tracking_uri(args.tracking_uri) if args.run else None  # --checkpoint: no MLflow
    trained = Trained.load(run_id=args.run, checkpoint=args.checkpoint, tracking_uri=tracking_uri, device=args.device,
                           average_last=args.average_last)
    trained.check_languages(args.src, args.tgt)
    kind = "test" if args.average_last is None else f"test_avg{args.average_last}"  # metrics test_avg5_bleu, ...
    result, references = trained.score(args.test, beam=args.beam, alpha=args.lenpen, device=args.device,
                                       metric_prefix=kind)
    files = write_outputs(Path(args.out or Path(args.test).name), result.hypotheses, references, trained.tgt_lang)
    print(json.dumps({k: round(v, 4) for k, v in result.metrics.items()}, indent=1))
    print(f"signature: {result.signature}", file=sys.stderr)
    print("wrote " + ", ".join(str(f) for f in files), file=sys.stderr)
    print(f"to recompute the scores: cd {files[-1].parent} && sh {files[-1].name}", file=sys.stderr)
    if args.run:
        log_test_results(tracking_uri, args.run, result, files, Path(args.test).name, kind)
    return 0


if __name__ == "__main__":
    run_cli(main)
