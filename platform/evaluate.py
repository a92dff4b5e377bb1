"""``python -m platform.evaluate``: score a trained model on any CoNLL-U pair set, or any
system's plain-text output against a plain-text reference.

    python -m platform.evaluate --run RUN_ID --test corpus/test --src ja --tgt en
    python -m platform.evaluate --checkpoint runs/.../checkpoint.pt --test corpus/test --src ja --tgt en --beam 4
    python -m platform.evaluate --run RUN_A --run RUN_B --test corpus/test --src ja --tgt en   # an ensemble
    python -m platform.evaluate --hyp system.en --ref test.en [--tgt en | --tokenize 13a] [--compare baseline.en]

The test pairs are encoded with the run's own subword models and settings, decoded with beam
search (the run's recipe's decoding by default: e.g. beam 4, α 0.6 for Deguchi et al.) and
scored: ``test_bleu``, ``test_chrf`` (sacrebleu, detokenized), ``test_bleu_tok`` (tokenized, as
the papers report), and for DBSA ``test_uas_enc`` / ``test_uas_dec`` against the set's own trees.
Hypotheses and references are written next to ``--out`` (``OUT.hyp``, ``OUT.ref`` detokenized;
``OUT.tok.hyp``, ``OUT.tok.ref`` tokenized), with ``OUT.sacrebleu.sh``, the sacrebleu command
lines that reproduce the scores; with ``--run`` the metrics and files are also logged to that
MLflow run (and, with ``--register-model NAME``, its model registered as a new version of NAME,
tagged with these scores).  ``--average-last N`` evaluates the average of the last N checkpoints' weights instead of
the best checkpoint (Vaswani et al. average the last 5), as ``test_avgN_bleu``, ... (files under
``test_avgN/``).  ``--metrics`` adds chrF++ (``test_chrfpp``) and TER (``test_ter``), with their
sacrebleu lines in ``OUT.sacrebleu.sh``.

    python -m platform.evaluate --run RUN_ID --test-text test.ja --ref test.en [--ref test2.en] --metrics bleu,chrf,ter

``--test-text SRC_FILE`` takes a plain-text test set instead: each line segmented (and parsed,
for a tree model) as the training data's source was, translated, and scored with sacreBLEU
against the ``--ref`` files (one or several), BLEU with the target language's tokenizer;
``OUT.hyp`` and ``OUT.sacrebleu.sh`` are written, and with ``--run`` the scores logged.

``--run`` (or ``--checkpoint``) repeated scores an ensemble of those models (their next-token
probabilities averaged at every step, ``models.ensemble``), not logged to any run.

With ``--hyp FILE --ref FILE`` (one detokenized sentence per line) no model is involved: the
``--metrics`` (sacreBLEU's BLEU with ``--tokenize``, by default the ``--tgt`` language's: ``char``
for Japanese, as runs are scored, ``ja-mecab`` with the ``ja`` extra, ``13a`` otherwise; chrF,
chrF++, TER; default BLEU and chrF) against one or several references (``--ref`` repeated),
their signatures and ``OUT.sacrebleu.sh`` (``platform.scoring``); ``--compare BASELINE`` adds the
paired bootstrap and approximate randomisation tests of ``--hyp`` against that other system's
output (one reference).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from platform import atomic, flags, scoring
from platform.errors import UserError, run_cli
from platform.flags import add_model_arguments


def build_parser() -> argparse.ArgumentParser:
    parser = flags.ArgumentParser(prog="python -m platform.evaluate", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser, required=False)
    parser.add_argument("--test", metavar="PREFIX", help="PREFIX.SRC.conllu[.gz] and PREFIX.TGT.conllu[.gz]")
    parser.add_argument("--test-text", metavar="SRC_FILE",
                        help="a plain-text test source, one sentence per line (segmented, and parsed for a tree "
                             "model, as the training data's source was), scored against --ref")
    parser.add_argument("--src", help="source language suffix")
    parser.add_argument("--tgt", help="target language suffix (with --hyp: chooses the default --tokenize)")
    parser.add_argument("--out", metavar="PREFIX",
                        help="where to write hypotheses/references (default: test name in cwd; with --hyp, "
                             "OUT.sacrebleu.sh, default the --hyp file's name in cwd)")
    parser.add_argument("--register-model", metavar="NAME",
                        help="with --run: register its best model as a new version of NAME in MLflow's model "
                             "registry, tagged with these test scores, with the alias 'champion'")
    parser.add_argument("--ref", metavar="FILE", action="append",
                        help="with --hyp or --test-text: the references, line by line; repeat it for several "
                             "references of each line")
    parser.add_argument("--metrics", default=",".join(scoring.DEFAULT_METRICS), type=scoring.parse_metrics,
                        metavar="LIST", help="which of bleu, chrf, chrf++, ter (sacreBLEU's), comma-separated "
                                             "(default: bleu,chrf; a model's --test scores also test_bleu_tok)")
    plain = parser.add_argument_group("plain text (no model)")
    plain.add_argument("--hyp", metavar="FILE", help="a system's translations, one detokenized sentence per line")
    plain.add_argument("--compare", metavar="BASELINE",
                       help="another system's translations: paired tests of --hyp against it")
    plain.add_argument("--tokenize", choices=scoring.TOKENIZERS,
                       help="sacreBLEU's BLEU tokenizer (default: the --tgt language's; 13a)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.hyp or args.compare or (args.ref and not args.test_text):
        return score_files(args)
    if args.ref and args.test:
        raise UserError("--ref goes with --hyp or --test-text; a --test set's references are its target CoNLL-U")
    if args.test and args.test_text:
        raise UserError("--test (CoNLL-U pairs) and --test-text (plain text with --ref): give one")
    if args.test_text:
        needed = (("--run or --checkpoint", args.run or args.checkpoint), ("--ref", args.ref))
    else:
        needed = (("--run or --checkpoint", args.run or args.checkpoint), ("--test or --test-text", args.test),
                  ("--src", args.src), ("--tgt", args.tgt))
    missing = [flag for flag, value in needed if not value]
    if missing:
        raise UserError(f"give {', '.join(missing)} (or --hyp and --ref to score plain text)")
    return score_model(args)


def score_model(args) -> int:
    from platform.inference import Trained, write_outputs, write_text_outputs  # torch, MLflow: only for a model
    from platform.tracking.registry import check_model_name, register
    from platform.tracking.run_files import log_test_results
    from platform.tracking.store import resolve_tracking_uri

    if args.tokenize:
        raise UserError("--tokenize goes with --hyp/--ref; a model's scores use its target language's tokenizer")
    if args.register_model is not None:
        check_model_name(args.register_model)
        if not args.run or len(args.run) > 1 or args.average_last is not None:
            raise UserError("--register-model registers the best model of one --run (not a --checkpoint file, an "
                            "ensemble, nor --average-last weights, which are no logged model)")
    tracking_uri = resolve_tracking_uri(args.tracking_uri) if args.run else None  # --checkpoint: no MLflow
    trained = Trained.load_all(run_ids=args.run, checkpoints=args.checkpoint, tracking_uri=tracking_uri,
                               device=args.device, average_last=args.average_last)
    if args.src:
        trained.check_languages(args.src, args.tgt)
    kind = "test" if args.average_last is None else f"test_avg{args.average_last}"  # metrics test_avg5_bleu, ...
    test = args.test or args.test_text
    out = Path(args.out or Path(test).name)
    if args.test_text:
        result = trained.score_text(args.test_text, args.ref, args.metrics, beam=args.beam, alpha=args.lenpen,
                                    device=args.device, metric_prefix=kind)
        files = write_text_outputs(out, result, args.test_text, args.ref, trained.tgt_lang, args.metrics)
    else:
        result, references = trained.score(args.test, beam=args.beam, alpha=args.lenpen, device=args.device,
                                           metric_prefix=kind, metrics=args.metrics)
        files = write_outputs(out, result.hypotheses, references, trained.tgt_lang, args.metrics)
    print(json.dumps({k: round(v, 4) for k, v in result.metrics.items()}, indent=1))
    print(f"signature: {result.signature}", file=sys.stderr)
    print("wrote " + ", ".join(str(f) for f in files), file=sys.stderr)
    print(f"to recompute the scores: cd {files[-1].parent} && sh {files[-1].name}", file=sys.stderr)
    if args.run and len(args.run) == 1:
        log_test_results(tracking_uri, args.run[0], result, files, Path(test).name, kind)
    elif args.run:
        print("an ensemble's scores are no run's own: not logged to MLflow", file=sys.stderr)
    if args.register_model:
        print(register(tracking_uri, args.run[0], args.register_model, "platform.evaluate").line(), file=sys.stderr)
    return 0


def score_files(args) -> int:
    """``--hyp``/``--ref`` (and ``--compare``): plain text scored, nothing of a model read."""
    if not (args.hyp and args.ref):
        raise UserError("--hyp and --ref go together (plain-text hypotheses and references, line by line)")
    given = [flag for flag, value in (("--run", args.run), ("--checkpoint", args.checkpoint), ("--test", args.test),
                                      ("--test-text", args.test_text)) if value]
    if given:
        raise UserError(f"{', '.join(given)} scores a model; --hyp/--ref score plain text: give one or the other")
    if args.compare and len(args.ref) > 1:
        raise UserError("--compare tests two systems against one --ref; give one reference")
    tokenize = args.tokenize or scoring.default_tokenizer(args.tgt)
    hyp, refs = scoring.read_references(args.hyp, args.ref)
    baseline = scoring.read_pair(args.compare, args.ref[0])[0] if args.compare else None
    scores = scoring.score_metrics(hyp, refs, tokenize, args.metrics)
    result: dict = {name: round(value, 4) for name, (value, _) in scores.items()}
    result.update(sentences=len(hyp), references=len(refs))
    if baseline is not None:
        from platform.tracking.significance import methods  # scipy: only with a baseline
        from platform.tracking.tables import format_table

        ref = refs[0]
        table = scoring.compare(hyp, baseline, ref, tokenize)
        base = scoring.score(baseline, ref, tokenize)
        result["compare"] = {"baseline_bleu": round(base.bleu, 4), "baseline_chrf": round(base.chrf, 4),
                             **{f"{metric.lower().rstrip('2')}_p_{test}": float(table[1][f"{metric} p ({test})"])
                                for metric in ("BLEU", "chrF2") for test in ("bs", "ar")}}
        print(f"{format_table(table)}\n\n({methods(tokenize)})", file=sys.stderr)
    script = Path(f"{args.out or Path(args.hyp).name}.sacrebleu.sh")
    commands = scoring.sacrebleu_commands(args.hyp, args.ref, tokenize, args.compare, args.metrics)
    atomic.write_texts({script: "".join(line + "\n" for line in
                                        ["# the scores of platform.evaluate --hyp, recomputed", *commands])})
    print(json.dumps(result, indent=1))
    for name, (_, signature) in scores.items():
        print(f"{name} signature: {signature}", file=sys.stderr)
    print(f"to recompute the scores: sh {script}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_cli(main)
