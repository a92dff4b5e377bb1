"""``python -m platform.parse``: raw text → CoNLL-U with a spaCy pipeline (optional ``[parse]`` extra).

    python -m platform.parse --lang ja --in train.ja --out train.ja.conllu
    python -m platform.parse --lang en --in train.en --out train.en.conllu --spacy-model en_core_web_sm --pretokenized

One input line is one sentence and one tree: every token after the first gets
``is_sent_start = False`` before the parser runs, so the parser cannot split the line.
Japanese uses ``ja_ginza`` (the full pipeline, so labels carry no ``_bunsetu`` suffixes) and,
by default, removes the spaces of pre-segmented input (GiNZA segments it again).  Lines are
parsed in batches with ``nlp.pipe``.  The output appears only when every line was parsed.
Unless ``--pretokenized``, the first sentence carries a ``# segmenter`` comment (the pipeline, its
version, whether spaces were removed), which ``platform.prepare`` records so that
``platform.translate`` and a served model segment raw input the same way.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from platform.data.parsing import DEFAULT_MODELS, load_pipeline, one_tree_docs, segmenter_of, to_conllu
from platform.data.storage import open_text_lines
from platform.errors import InputError, UserError, run_cli


def read_lines(path: str | Path, strip_spaces: bool) -> list[tuple[str, str]]:
    """``(line as given, text for the parser)`` for every line; blank lines are errors."""
    lines = []
    for number, line in open_text_lines(path):
        text = "".join(line.split()) if strip_spaces else " ".join(line.split())
        if not text:
            raise InputError(path, number, "empty line (every line must be one sentence)")
        lines.append((line.strip(), text))
    if not lines:
        raise InputError(path, None, "no sentences (empty input)")
    return lines


def parse_file(nlp, source: str | Path, out: str | Path, *, strip_spaces: bool, pretokenized: bool,
               batch_size: int = 256, progress: bool = True) -> int:
    """Parse every line of ``source`` into CoNLL-U ``out`` (gzip if it ends in .gz); returns the count."""
    lines = read_lines(source, strip_spaces)
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp")
    opener = gzip.open if out.suffix == ".gz" else open
    try:
        with opener(tmp, "wt", encoding="utf-8") as handle:
            texts = [text for _, text in lines]
            docs = nlp.pipe(one_tree_docs(nlp, texts, pretokenized), batch_size=batch_size)
            parsed = tqdm(zip(lines, docs), total=len(lines), disable=not progress, unit="sent")
            segmenter = None if pretokenized else segmenter_of(nlp, strip_spaces)  # words of the input's own
            for number, ((line, _), doc) in enumerate(parsed, 1):
                handle.write(to_conllu(doc, str(number), line, segmenter if number == 1 else None))
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m platform.parse", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lang", required=True, help="language code; ja uses ja_ginza by default")
    parser.add_argument("--in", dest="source", required=True, metavar="FILE",
                        help="one sentence per line (UTF-8, .gz allowed)")
    parser.add_argument("--out", required=True, metavar="FILE", help="CoNLL-U output (.conllu or .conllu.gz)")
    parser.add_argument("--spacy-model", metavar="NAME", help="any installed spaCy pipeline with a parser")
    parser.add_argument("--pretokenized", action="store_true", help="keep the input's whitespace tokenization")
    parser.add_argument("--keep-spaces", action="store_true",
                        help="ja: keep spaces (default: remove them and let GiNZA segment)")
    parser.add_argument("--batch-size", type=int, default=256, help="sentences per nlp.pipe batch (default 256)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    model = args.spacy_model or DEFAULT_MODELS.get(args.lang)
    if model is None:
        raise UserError(f"no default spaCy pipeline for {args.lang!r}; pass --spacy-model NAME")
    strip_spaces = args.lang == "ja" and not args.keep_spaces and not args.pretokenized
    nlp = load_pipeline(model)
    count = parse_file(nlp, args.source, args.out, strip_spaces=strip_spaces, pretokenized=args.pretokenized,
                       batch_size=args.batch_size, progress=not args.quiet and sys.stderr.isatty())
    print(f"wrote {count} trees to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_cli(main)
