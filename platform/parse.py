"""``python -m platform.parse``: raw text → CoNLL-U with a spaCy pipeline (optional ``[parse]`` extra).

    python -m platform.parse --lang ja --in train.ja --out train.ja.conllu
    python -m platform.parse --lang en --in train.en --out train.en.conllu --spacy-model en_core_web_sm --pretokenized
    python -m platform.parse --lang ja --in train.ja.gz --out train.ja.conllu.gz --address auto --workers 16

One input line is one sentence and one tree: every token after the first gets
``is_sent_start = False`` before the parser runs, so the parser cannot split the line (a line of
two sentences, 今日は晴れ。明日は雨。, is one tree).  Japanese uses ``ja_ginza`` (the full pipeline,
so labels carry no ``_bunsetu`` suffixes) and, by default, removes the spaces of pre-segmented
input (GiNZA segments it again).  Unless ``--pretokenized``, the first sentence carries a
``# segmenter`` comment (the pipeline, its version, whether spaces were removed), which
``platform.prepare`` records so that ``platform.translate`` and a served model segment raw input
the same way.

The input is checked before anything is parsed: a blank line (or one of whitespace only) or
invalid UTF-8 is an error naming its line, and nothing is written.  Line ends may be LF or CRLF,
and a UTF-8 byte-order mark is dropped.  Sentence ids are the line numbers, and ``# text`` is the
line without its surrounding whitespace.

The lines are parsed as a Ray job (``platform/launch/parse_job.py``): shards of ``--shard-size``
lines, each parsed by one of ``--workers`` actors in ``nlp.pipe`` batches of ``--batch-size``, and
written to ``OUT.shards/`` as it is done.  The output is the same bytes whatever the number of
workers.  Run again after a kill or a crash, the same command skips the shards already written
for the same input and settings; ``OUT`` appears only when every shard is parsed, and
``OUT.shards/`` is removed then.  Without ``--address`` the job runs on a local Ray cluster; with
it, on that cluster (its nodes need the pipeline, not the input: the driver reads and writes
every file).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from platform import flags
from platform.data.parsing import DEFAULT_MODELS
from platform.errors import UserError, run_cli
from platform.launch.parse_job import ParseConfig, parse_corpus


def build_parser() -> argparse.ArgumentParser:
    parser = flags.ArgumentParser(prog="python -m platform.parse", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lang", required=True, help="language code; ja uses ja_ginza by default")
    parser.add_argument("--in", dest="source", required=True, metavar="FILE",
                        help="one sentence per line (UTF-8, .gz allowed)")
    parser.add_argument("--out", required=True, metavar="FILE", help="CoNLL-U output (.conllu or .conllu.gz)")
    parser.add_argument("--spacy-model", metavar="NAME", help="any installed spaCy pipeline with a parser")
    parser.add_argument("--pretokenized", action="store_true", help="keep the input's whitespace tokenization")
    parser.add_argument("--keep-spaces", action="store_true",
                        help="ja: keep spaces (default: remove them and let GiNZA segment)")
    parser.add_argument("--batch-size", type=int, default=ParseConfig.batch_size,
                        help=f"sentences per nlp.pipe batch (default {ParseConfig.batch_size})")
    parser.add_argument("--shard-size", type=int, default=ParseConfig.shard_size,
                        help=f"lines per shard, the unit of work and of resuming (default {ParseConfig.shard_size})")
    parser.add_argument("--workers", type=int, help="parsing actors, one CPU each (default: the cluster's CPUs)")
    parser.add_argument("--address", help="Ray cluster address (default: start a local one, or 'auto')")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    model = args.spacy_model or DEFAULT_MODELS.get(args.lang)
    if model is None:
        raise UserError(f"no default spaCy pipeline for {args.lang!r}; pass --spacy-model NAME")
    config = ParseConfig(source=args.source, out=Path(args.out), model=model,
                         strip_spaces=args.lang == "ja" and not args.keep_spaces and not args.pretokenized,
                         pretokenized=args.pretokenized, batch_size=args.batch_size, shard_size=args.shard_size,
                         workers=args.workers, address=args.address,
                         progress=not args.quiet and sys.stderr.isatty())
    result = parse_corpus(config, log=partial(print, file=sys.stderr))
    print(f"wrote {result.sentences} trees to {args.out} in {result.wall_s:.1f} s ({result.shards} shards, "
          f"{result.workers} workers, {result.skipped} skipped)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_cli(main)
