"""``python -m platform.prepare``: paired CoNLL-U → subwords → Parquet dataset (docs/architecture.md).

    python -m platform.prepare --data demo --out data/demo
    python -m platform.prepare --train PREFIX --dev PREFIX [--test PREFIX] --src ja --tgt en --out DIR
    python -m platform.prepare --subwords-from DIR --test PREFIX --src ja --tgt en --out DIR2

``PREFIX.LANG.conllu`` or ``PREFIX.LANG.conllu.gz`` is read for each side.  The third form
encodes new data with an existing dataset's subword models (to evaluate a trained model on it).
The output directory appears only when everything succeeded (written to a temporary sibling,
then renamed); an existing one is kept unless ``--overwrite`` is given.  ``--out`` may be a URI
(``s3://bucket/prefix``, anything ``pyarrow.fs`` opens): the dataset is prepared in a local
temporary directory, then uploaded with its ``COMMITTED`` marker last (``data.storage``);
``--subwords-from``, ``--train``/``--dev``/``--test`` read URIs too.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence

from platform import config_io, flags
from platform.data import dataset as ds
from platform.data import demo
from platform.data.builtin import prepare_demo
from platform.data.encode import PrepareConfig, prepare
from platform.errors import UserError, run_cli

# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = flags.ArgumentParser(prog="python -m platform.prepare", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_argument_group("input")
    source.add_argument("--data", choices=["demo"], help="generate and prepare the built-in synthetic demo corpus")
    source.add_argument("--train", metavar="PREFIX",
                        help="training pairs: PREFIX.SRC.conllu[.gz] and PREFIX.TGT.conllu[.gz]")
    source.add_argument("--dev", metavar="PREFIX", help="development pairs (same naming)")
    source.add_argument("--test", metavar="PREFIX", help="test pairs (same naming)")
    source.add_argument("--src", metavar="LANG", help="source language suffix, e.g. ja")
    source.add_argument("--tgt", metavar="LANG", help="target language suffix, e.g. en")
    source.add_argument("--subwords-from", metavar="DIR",
                        help="reuse DIR's subword models and settings (encode new data for a trained model)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output dataset directory")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --out (only once the new one is complete)")
    opts = parser.add_argument_group("subwords and trees")
    opts.add_argument("--vocab-size", type=int,
                      help="subword vocabulary size per model "
                           "(default 8000; demo: the lexicon's, 600 small / 4000 large)")
    opts.add_argument("--model-type", choices=["bpe", "unigram"], default="bpe",
                      help="SentencePiece model type (default bpe)")
    opts.add_argument("--character-coverage", type=float, default=1.0,
                      help="SentencePiece character coverage (default 1.0; below 1 the rarest characters become <unk>)")
    opts.add_argument("--byte-fallback", action="store_true", help="spell unknown characters as bytes instead of <unk>")
    opts.add_argument("--joint-vocab", action="store_true", help="one subword model shared by both languages")
    opts.add_argument("--max-len", type=int, default=250,
                      help="drop training pairs longer than this in subwords (default 250)")
    opts.add_argument("--subword-head", choices=["first", "last"], default="first",
                      help="a word-final subword's head: the head word's first (default) or last subword")
    opts.add_argument("--fix-roots", action="store_true",
                      help="attach extra roots to a sentence's first root instead of failing")
    gen = parser.add_argument_group("demo corpus")
    gen.add_argument("--demo-sizes", metavar="TRAIN,DEV,TEST", default="20000,500,500",
                     help="demo pair counts (default 20000,500,500)")
    gen.add_argument("--demo-lexicon", metavar="SIZE", default="small",
                     help="demo lexicon: " + "; ".join(f"{name} ({size.nouns + size.verbs + size.adjectives} lemmas, "
                                                       f"{size.purpose})" for name, size in demo.LEXICONS.items())
                          + "; or NOUNS,VERBS,ADJECTIVES (default small)")
    gen.add_argument("--seed", type=int, default=1, help="demo generator seed (default 1)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    return parser


def config_from_args(args: argparse.Namespace, src: str, tgt: str, default_vocab: int) -> PrepareConfig:
    subwords = {"vocab_size": args.vocab_size or default_vocab, "model_type": args.model_type,
                "character_coverage": args.character_coverage, "byte_fallback": args.byte_fallback}
    return config_io.from_dict(PrepareConfig, {
        "src_lang": src, "tgt_lang": tgt, "subwords": subwords, "joint_vocab": args.joint_vocab,
        "max_len": args.max_len, "subword_head": args.subword_head, "fix_roots": args.fix_roots,
    })


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log = (lambda message: None) if args.quiet else (lambda message: print(message, file=sys.stderr))
    progress = not args.quiet and sys.stderr.isatty()
    ds.write_dataset(args.out, lambda out: _prepare(args, out, log, progress), overwrite=args.overwrite, log=log)
    return 0


def _prepare(args: argparse.Namespace, out: str, log, progress: bool) -> int:
    if args.data == "demo":
        if args.train or args.dev or args.test or args.subwords_from:
            raise UserError("--data demo generates its own splits; drop --train/--dev/--test/--subwords-from")
        named = demo.LEXICONS.get(args.demo_lexicon)
        config = config_from_args(args, demo.SRC_LANG, demo.TGT_LANG,
                                  default_vocab=named.vocab_size if named else demo.LEXICONS["large"].vocab_size)
        prepare_demo(out, config, demo.config_from_args(args.demo_sizes, args.seed, args.demo_lexicon),
                     overwrite=args.overwrite, progress=progress, log=log)
        return 0
    if not args.src or not args.tgt:
        raise UserError("--src and --tgt are required (or --data demo)")
    prefixes = {split: getattr(args, split) for split in ds.SPLITS if getattr(args, split)}
    if args.subwords_from:
        if not prefixes:
            raise UserError("--subwords-from needs at least one of --train/--dev/--test to encode")
        config = _reused_config(args.subwords_from, args.src, args.tgt, args.max_len)
    else:
        if not args.train or not args.dev:
            raise UserError("--train and --dev are required (or --data demo, or --subwords-from DIR)")
        config = config_from_args(args, args.src, args.tgt, default_vocab=8000)
    prepare(config, prefixes, out, subwords_from=args.subwords_from, overwrite=args.overwrite,
            progress=progress, log=log)
    return 0


def _reused_config(directory: str, src: str, tgt: str, max_len: int) -> PrepareConfig:
    """The settings of an existing dataset, so new data is encoded exactly like its training data."""
    meta = ds.read_meta(directory)
    if (meta["src_lang"], meta["tgt_lang"]) != (src, tgt):
        raise UserError(f"{directory} is {meta['src_lang']}->{meta['tgt_lang']}, not {src}->{tgt}")
    stored = config_io.from_dict(PrepareConfig, config_io.yaml_load(ds.read_config_text(directory)) or {})
    return dataclasses.replace(stored, max_len=max_len)


if __name__ == "__main__":
    run_cli(main)
