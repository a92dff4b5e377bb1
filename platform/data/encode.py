"""Preparing a dataset: paired CoNLL-U → subwords → Parquet (docs/architecture.md).

``prepare`` reads CoNLL-U prefixes (``PREFIX.LANG.conllu[.gz]`` per side), learns or reuses
the subword models, encodes every split with its trees and writes the dataset directory
atomically.  ``python -m platform.prepare`` is the command over it; ``data.builtin`` prepares
the generated demo corpus through it.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import sentencepiece
from tqdm import tqdm

from models.inputs import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from platform import atomic
from platform import config as config_io
from platform.data import dataset as ds
from platform.data import storage
from platform.data.conllu import Sentence, read_conllu
from platform.data.parsing import Segmenter, read_segmenter
from platform.data.subwords import SubwordConfig, SubwordModel, train_subwords
from platform.data.trees import binary_tree, project_heads, word_depths
from platform.errors import InputError, UserError


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
    files: tuple[str, str]  # local paths or URIs


Log = Callable[[str], None]


# --------------------------------------------------------------------------- reading


def read_corpus(prefix: str | Path, config: PrepareConfig, progress: bool = False) -> Corpus:
    src_path = storage.conllu_path(prefix, config.src_lang)
    tgt_path = storage.conllu_path(prefix, config.tgt_lang)
    src = read_conllu(src_path, fix_roots=config.fix_roots, progress=progress)
    tgt = read_conllu(tgt_path, fix_roots=config.fix_roots, progress=progress)
    if len(src) != len(tgt):
        longer, shorter = (src_path, tgt) if len(src) > len(tgt) else (tgt_path, src)
        extra = (src if len(src) > len(tgt) else tgt)[len(shorter)]
        raise InputError(
            longer, extra.line, f"sentence counts differ: {src_path} has {len(src)}, {tgt_path} has {len(tgt)}"
        )
    return Corpus(src=src, tgt=tgt, files=(src_path, tgt_path))


def segmentation(corpus: Corpus) -> dict[str, Segmenter | str]:
    """How each side's words were segmented (``data.parsing.read_segmenter`` of the corpus's files,
    the train split's where there is one): what ``platform.translate`` applies to raw input."""
    return {"src": read_segmenter(corpus.files[0]), "tgt": read_segmenter(corpus.files[1])}


# --------------------------------------------------------------------------- encoding


def encode_corpus(
    corpus: Corpus, models: tuple[SubwordModel, SubwordModel], config: PrepareConfig, *, filter_long: bool,
    progress: bool
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
           f"{side}_depth": word_depths(sentence.heads, word),  # Omote: word depths (data/trees.py)
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


def check_output(out: Path, overwrite: bool) -> None:
    """Fail before any work if ``out`` holds something that would be replaced."""
    atomic.recover_directory(out)
    if out.exists() and not overwrite:
        if not out.is_dir() or any(out.iterdir()):
            raise UserError(f"{out} already exists; pass --overwrite to replace it")


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
        models_bytes = {side: ds.read_subword_model(subwords_from, side) for side in ("src", "tgt")}
    else:
        log(f"learning subwords ({config.subwords.model_type}, vocab ≤ {config.subwords.vocab_size})")
        models_bytes = learn_models(corpora["train"], config)
    models = (SubwordModel(models_bytes["src"]), SubwordModel(models_bytes["tgt"]))
    tmp = atomic.temporary_sibling(out)
    try:
        meta = _write_all(tmp, config, corpora, models, models_bytes, progress, log)
        meta["subwords_from"] = str(subwords_from) if subwords_from is not None else None
        meta["segmentation"] = segmentation(corpora.get("train") or next(iter(corpora.values())))
        _relocate_paths(meta, attach or {})
        meta.update(extra_meta or {})
        meta["seconds"] = round(time.perf_counter() - started, 2)
        ds.write_meta(tmp, meta)
        config_io.dump_yaml(config, tmp / ds.CONFIG_FILE)
        for name, directory in (attach or {}).items():
            shutil.copytree(directory, tmp / name)
        atomic.commit_directory(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    written = ", ".join(f"{split} {stats['pairs_written']}" for split, stats in meta["splits"].items())
    log(f"wrote {out} in {meta['seconds']} s: {written}")
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
        ds.write_split(tmp, split, table, config.row_group_size)
        splits[split] = {**stats, "files": [str(p) for p in corpus.files]}
    for side, blob in models_bytes.items():
        ds.write_subword_model(tmp, side, blob)
    return {
        "format_version": ds.FORMAT_VERSION,
        "src_lang": config.src_lang,
        "tgt_lang": config.tgt_lang,
        "vocab_size": {"src": len(models[0]), "tgt": len(models[1])},
        "special_ids": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
        "splits": splits,
        "inputs_sha256": {str(p): storage.input_sha256(p) for c in corpora.values() for p in c.files},
        "subword_library": f"sentencepiece {sentencepiece.__version__}",
        "config": config_io.to_dict(config),
        "command": shlex.join([Path(sys.executable).name, "-m", "platform.prepare", *sys.argv[1:]]),
    }
