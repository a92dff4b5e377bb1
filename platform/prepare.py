"""``python -m platform.prepare``: paired CoNLL-U → subwords → Parquet dataset (DESIGN.md §3).

    python -m platform.prepare --data demo --out data/demo
    python -m platform.prepare --train PREFIX --dev PREFIX [--test PREFIX] --src ja --tgt en --out DIR
    python -m platform.prepare --subwords-from DIR --test PREFIX --src ja --tgt en --out DIR2

``PREFIX.LANG.conllu`` or ``PREFIX.LANG.conllu.gz`` is read for each side.  The third form
encodes new data with an existing dataset's subword models (to evaluate a trained model on it).
The output directory appears only when everything succeeded (written to a temporary sibling,
then renamed); an existing one is kept unless ``--overwrite`` is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
import sentencepiece
from tqdm import tqdm

from platform import config as config_io
from platform import dataset as ds
from platform import demo
from platform.conllu import Sentence, read_conllu
from platform.errors import InputError, UserError, run_cli
from platform.subwords import SubwordConfig, SubwordModel, train_subwords
from platform.trees import binary_tree, project_heads, word_depths


@dataclass(frozen=True, kw_only=True)
class PrepareConfig:
    src_lang: str
    tgt_lang: str
    subwords: SubwordConfig = field(default_factory=SubwordConfig)
    joint_vocab: bool = False  # one subword model for both languages
    max_len: int = 250  # training pairs with more subwords on either side are dropped
    subword_head: Literal["first", "last"] = "first"  # DBSA rule: head word's first/last subword
    fix_roots: bool = False  # attach extra roots to the first root instead of failing
    row_group_size: int = 4096

    def __post_init__(self) -> None:
        if self.max_len < 1:
            raise ValueError(f"max_len must be positive, got {self.max_len}")
        if self.src_lang == self.tgt_lang:
            raise ValueError(f"source and target language are both {self.src_lang!r}")


@dataclass(frozen=True)
class Corpus:
    """One split read from disk: validated sentence pairs and where they came from."""

    src: list[Sentence]
    tgt: list[Sentence]
    files: tuple[Path, Path]


Log = Callable[[str], None]


# --------------------------------------------------------------------------- reading


def conllu_path(prefix: str | Path, lang: str) -> Path:
    """``PREFIX.LANG.conllu`` or ``PREFIX.LANG.conllu.gz``, whichever exists (not both)."""
    plain = Path(f"{prefix}.{lang}.conllu")
    packed = Path(f"{plain}.gz")
    if plain.exists() and packed.exists():
        raise UserError(f"both {plain} and {packed} exist; remove one")
    if plain.exists():
        return plain
    if packed.exists():
        return packed
    raise UserError(f"{plain}[.gz]: file not found")


def read_corpus(prefix: str | Path, config: PrepareConfig, progress: bool = False) -> Corpus:
    src_path = conllu_path(prefix, config.src_lang)
    tgt_path = conllu_path(prefix, config.tgt_lang)
    src = read_conllu(src_path, fix_roots=config.fix_roots, progress=progress)
    tgt = read_conllu(tgt_path, fix_roots=config.fix_roots, progress=progress)
    if len(src) != len(tgt):
        longer, shorter = (src_path, tgt) if len(src) > len(tgt) else (tgt_path, src)
        extra = (src if len(src) > len(tgt) else tgt)[len(shorter)]
        raise InputError(
            longer, extra.line, f"sentence counts differ: {src_path} has {len(src)}, {tgt_path} has {len(tgt)}"
        )
    return Corpus(src=src, tgt=tgt, files=(src_path, tgt_path))


# --------------------------------------------------------------------------- encoding


def encode_corpus(
    corpus: Corpus, models: tuple[SubwordModel, SubwordModel], config: PrepareConfig, *, filter_long: bool, progress: bool
) -> tuple[pa.Table, dict[str, int]]:
    """Encode a split into a Parquet table; long pairs are dropped only when ``filter_long``."""
    src_encoded = models[0].encode_sentences([s.words for s in corpus.src])
    tgt_encoded = models[1].encode_sentences([s.words for s in corpus.tgt])
    columns: dict[str, list[Any]] = {name: [] for name in ds.SCHEMA.names}
    too_long = 0
    pairs = zip(corpus.src, corpus.tgt, src_encoded, tgt_encoded)
    for src, tgt, (src_ids, src_word), (tgt_ids, tgt_word) in tqdm(
        pairs, total=len(corpus.src), desc="encode", unit="pair", disable=not progress, leave=False
    ):
        if max(len(src_ids), len(tgt_ids)) > config.max_len:
            too_long += 1
            if filter_long:
                continue
        row = {**side_columns("src", src, src_ids, src_word, config.subword_head),
               **side_columns("tgt", tgt, tgt_ids, tgt_word, config.subword_head)}
        for name, value in row.items():
            columns[name].append(value)
    stats = {
        "pairs_read": len(corpus.src),
        "pairs_written": len(columns["src_ids"]),
        "dropped_too_long" if filter_long else "over_max_len_kept": too_long,
        "roots_fixed": sum(s.roots_fixed for s in corpus.src) + sum(s.roots_fixed for s in corpus.tgt),
    }
    return pa.Table.from_pydict(columns, schema=ds.SCHEMA), stats


def side_columns(side: str, sentence: Sentence, ids: list[int], word: list[int], subword_head: str) -> dict[str, Any]:
    """The Parquet columns of one side of a pair (the binary tree for the source only)."""
    heads = project_heads(sentence.heads, word, subword_head)
    row = {f"{side}_ids": ids, f"{side}_heads": heads, f"{side}_word": word,
           f"{side}_depth": word_depths(sentence.heads, word),  # Omote: word depths (platform/trees.py)
           f"{side}_text": sentence.text}
    if side == "src":
        row["src_tree_parent"] = binary_tree(sentence.heads, word)
    return row


def learn_models(train: Corpus, config: PrepareConfig) -> dict[str, bytes]:
    """Serialized subword models for ``src`` and ``tgt`` (the same model twice if joint)."""
    src_words = [s.words for s in train.src]
    tgt_words = [s.words for s in train.tgt]
    if config.joint_vocab:
        joint = train_subwords(src_words + tgt_words, config.subwords)
        return {"src": joint, "tgt": joint}
    return {"src": train_subwords(src_words, config.subwords), "tgt": train_subwords(tgt_words, config.subwords)}


# --------------------------------------------------------------------------- writing


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_output(out: Path, overwrite: bool) -> None:
    """Fail before any work if ``out`` holds something that would be replaced."""
    recover_directory(out)
    if out.exists() and not overwrite:
        if not out.is_dir() or any(out.iterdir()):
            raise UserError(f"{out} already exists; pass --overwrite to replace it")


def commit_directory(tmp: Path, out: Path) -> None:
    """Move a finished temporary directory to ``out``, replacing an old one only at the end.

    The files are fsynced before the rename, so a crash leaves either the old directory or the
    complete new one under ``out`` (a crash between the two renames leaves the old one as
    ``.NAME.old``, which ``recover_directory`` puts back)."""
    from platform.training import fsync_directory

    for path in sorted(tmp.rglob("*")):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    fsync_directory(tmp)
    old = out.with_name(f".{out.name}.old")
    if out.exists():
        if old.exists():
            shutil.rmtree(old)
        out.rename(old)
    tmp.rename(out)
    fsync_directory(out.parent)
    if old.exists():  # renamed away first: a kill during the delete must not leave a ".old" to restore
        trash = out.with_name(f".{out.name}.trash-{os.getpid()}")
        old.rename(trash)
        shutil.rmtree(trash)


def recover_directory(out: Path) -> None:
    """Undo a commit killed between its two renames: the previous ``out`` comes back."""
    old = out.with_name(f".{out.name}.old")
    if old.is_dir() and not out.exists():
        old.rename(out)
        print(f"restored {out} from an interrupted replacement", file=sys.stderr)


def temporary_sibling(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    if tmp.exists():  # left by a killed run; never user data (hidden name owned by us)
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


# --------------------------------------------------------------------------- the job


def prepare(
    config: PrepareConfig,
    prefixes: dict[str, str | Path],
    out: str | Path,
    *,
    subwords_from: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
    log: Log = lambda message: print(message, file=sys.stderr),
    extra_meta: dict[str, Any] | None = None,
    attach: dict[str, Path] | None = None,
) -> dict[str, Any]:
    """Prepare a dataset directory from CoNLL-U prefixes (``{"train": ..., "dev": ...}``).

    ``attach`` maps names to directories copied into the dataset before it is committed."""
    out = Path(out)
    check_output(out, overwrite)
    started = time.perf_counter()
    corpora = {}
    for split, prefix in prefixes.items():
        log(f"reading {split}: {prefix}.{{{config.src_lang},{config.tgt_lang}}}.conllu")
        corpora[split] = read_corpus(prefix, config, progress)
    if subwords_from is not None:
        models_bytes = {side: ds.subword_model_path(subwords_from, side).read_bytes() for side in ("src", "tgt")}
    else:
        log(f"learning subwords ({config.subwords.model_type}, vocab ≤ {config.subwords.vocab_size})")
        models_bytes = learn_models(corpora["train"], config)
    models = (SubwordModel(models_bytes["src"]), SubwordModel(models_bytes["tgt"]))
    tmp = temporary_sibling(out)
    try:
        meta = _write_all(tmp, config, corpora, models, models_bytes, progress, log)
        meta["subwords_from"] = str(subwords_from) if subwords_from is not None else None
        _relocate_paths(meta, attach or {})
        meta.update(extra_meta or {})
        meta["seconds"] = round(time.perf_counter() - started, 2)
        (tmp / ds.META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        config_io.dump_yaml(config, tmp / ds.CONFIG_FILE)
        for name, directory in (attach or {}).items():
            shutil.copytree(directory, tmp / name)
        commit_directory(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"wrote {out} in {meta['seconds']} s: " + ", ".join(f"{s} {v['pairs_written']}" for s, v in meta["splits"].items()))
    return meta


def _relocate_paths(meta: dict[str, Any], attach: dict[str, Path]) -> None:
    """Input files that are copied into the dataset are recorded by their path inside it."""

    def inside(path: str) -> str:
        for name, directory in attach.items():
            if Path(path).parent == Path(directory):
                return f"{name}/{Path(path).name}"
        return path

    for stats in meta["splits"].values():
        stats["files"] = [inside(p) for p in stats["files"]]
    meta["inputs_sha256"] = {inside(p): h for p, h in meta["inputs_sha256"].items()}


def _write_all(tmp, config, corpora, models, models_bytes, progress, log) -> dict[str, Any]:
    splits = {}
    for split, corpus in corpora.items():
        log(f"encoding {split} ({len(corpus.src)} pairs)")
        table, stats = encode_corpus(corpus, models, config, filter_long=split == "train", progress=progress)
        pq.write_table(table, ds.split_path(tmp, split), row_group_size=config.row_group_size, compression="zstd")
        splits[split] = {**stats, "files": [str(p) for p in corpus.files]}
    for side, blob in models_bytes.items():
        ds.subword_model_path(tmp, side).write_bytes(blob)
    return {
        "format_version": ds.FORMAT_VERSION,
        "src_lang": config.src_lang,
        "tgt_lang": config.tgt_lang,
        "vocab_size": {"src": len(models[0]), "tgt": len(models[1])},
        "special_ids": {"pad": 0, "unk": 1, "bos": 2, "eos": 3},
        "splits": splits,
        "inputs_sha256": {str(p): sha256_file(p) for c in corpora.values() for p in c.files},
        "subword_library": f"sentencepiece {sentencepiece.__version__}",
        "config": config_io.to_dict(config),
        "command": shlex.join([Path(sys.executable).name, "-m", "platform.prepare", *sys.argv[1:]]),
    }


def prepare_demo(
    out: str | Path, config: PrepareConfig, demo_config: demo.DemoConfig, *, overwrite: bool = False, progress: bool = True, log: Log = lambda m: print(m, file=sys.stderr)
) -> dict[str, Any]:
    """Generate the synthetic demo corpus as CoNLL-U and prepare it through the same path.

    The CoNLL-U files are kept in ``OUT/conllu/`` (to inspect, or to evaluate on)."""
    out = Path(out)
    existing = _existing_demo(out, config, demo_config)
    if existing is not None and not overwrite:
        log(f"{out} already holds this demo dataset (same generator and prepare settings); keeping it")
        return existing
    check_output(out, overwrite)
    with _scratch(out) as scratch:
        log(f"generating the synthetic demo corpus ({demo_config.num_train}/{demo_config.num_dev}/{demo_config.num_test} pairs, seed {demo_config.seed})")
        prefixes = demo.write_corpus(scratch, demo_config)
        return prepare(config, prefixes, out, overwrite=overwrite, progress=progress, log=log,
                       extra_meta={"demo": config_io.to_dict(demo_config)}, attach={"conllu": scratch})


def _existing_demo(out: Path, config: PrepareConfig, demo_config: demo.DemoConfig) -> dict[str, Any] | None:
    """The metadata of ``out`` if it is a complete demo dataset made with these exact settings."""
    try:
        meta = json.loads((out / ds.META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    same = (meta.get("format_version") == ds.FORMAT_VERSION and meta.get("demo") == config_io.to_dict(demo_config)
            and meta.get("config") == config_io.to_dict(config))
    return meta if same and all(ds.split_path(out, split).exists() for split in ds.SPLITS) else None


class _scratch:
    """A temporary directory next to ``out`` (same filesystem), removed on exit."""

    def __init__(self, out: Path):
        self.path = out.with_name(f".{out.name}.demo-src")

    def __enter__(self) -> Path:
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir(parents=True)
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m platform.prepare", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_argument_group("input")
    source.add_argument("--data", choices=["demo"], help="generate and prepare the built-in synthetic demo corpus")
    source.add_argument("--train", metavar="PREFIX", help="training pairs: PREFIX.SRC.conllu[.gz] and PREFIX.TGT.conllu[.gz]")
    source.add_argument("--dev", metavar="PREFIX", help="development pairs (same naming)")
    source.add_argument("--test", metavar="PREFIX", help="test pairs (same naming)")
    source.add_argument("--src", metavar="LANG", help="source language suffix, e.g. ja")
    source.add_argument("--tgt", metavar="LANG", help="target language suffix, e.g. en")
    source.add_argument("--subwords-from", metavar="DIR", help="reuse DIR's subword models and settings (encode new data for a trained model)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output dataset directory")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out (only once the new one is complete)")
    opts = parser.add_argument_group("subwords and trees")
    opts.add_argument("--vocab-size", type=int, help="subword vocabulary size per model (default 8000; demo 4000)")
    opts.add_argument("--model-type", choices=["bpe", "unigram"], default="bpe", help="SentencePiece model type (default bpe)")
    opts.add_argument("--character-coverage", type=float, default=1.0, help="SentencePiece character coverage (default 1.0; below 1 the rarest characters become <unk>)")
    opts.add_argument("--byte-fallback", action="store_true", help="spell unknown characters as bytes instead of <unk>")
    opts.add_argument("--joint-vocab", action="store_true", help="one subword model shared by both languages")
    opts.add_argument("--max-len", type=int, default=250, help="drop training pairs longer than this in subwords (default 250)")
    opts.add_argument("--subword-head", choices=["first", "last"], default="first", help="a word-final subword's head: the head word's first (default) or last subword")
    opts.add_argument("--fix-roots", action="store_true", help="attach extra roots to a sentence's first root instead of failing")
    gen = parser.add_argument_group("demo corpus")
    gen.add_argument("--demo-sizes", metavar="TRAIN,DEV,TEST", default="20000,500,500", help="demo pair counts (default 20000,500,500)")
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
    if args.data == "demo":
        if args.train or args.dev or args.test or args.subwords_from:
            raise UserError("--data demo generates its own splits; drop --train/--dev/--test/--subwords-from")
        config = config_from_args(args, demo.SRC_LANG, demo.TGT_LANG, default_vocab=4000)
        prepare_demo(args.out, config, demo.config_from_sizes(args.demo_sizes, args.seed),
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
    prepare(config, prefixes, args.out, subwords_from=args.subwords_from, overwrite=args.overwrite,
            progress=progress, log=log)
    return 0


def _reused_config(directory: str, src: str, tgt: str, max_len: int) -> PrepareConfig:
    """The settings of an existing dataset, so new data is encoded exactly like its training data."""
    meta = ds.read_meta(directory)
    if (meta["src_lang"], meta["tgt_lang"]) != (src, tgt):
        raise UserError(f"{directory} is {meta['src_lang']}->{meta['tgt_lang']}, not {src}->{tgt}")
    stored = config_io.load(PrepareConfig, Path(directory) / ds.CONFIG_FILE)
    return dataclasses.replace(stored, max_len=max_len)


if __name__ == "__main__":
    run_cli(main)
