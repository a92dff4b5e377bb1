"""Preparing a dataset: paired CoNLL-U → subwords → Parquet (docs/architecture.md).

``prepare`` reads CoNLL-U prefixes (``PREFIX.LANG.conllu[.gz]`` per side), learns or reuses
the subword models, encodes every split with its trees and writes the dataset directory
atomically.  It streams: sentences are read one by one and encoded a row group at a time, so its
memory does not grow with the corpus (subwords are learned from word counts: ``learn_models``).
``python -m platform.prepare`` is the command over it; ``data.builtin`` prepares the generated
demo corpus through it.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice, zip_longest
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import sentencepiece
from tqdm import tqdm

from models.inputs import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from platform import atomic, config_io
from platform.data import dataset as ds
from platform.data import storage
from platform.data.conllu import Sentence, iter_conllu
from platform.data.parsing import Segmenter, read_segmenter
from platform.data.subwords import SubwordConfig, SubwordModel, train_subwords
from platform.data.trees import binary_tree, project_heads, word_depths
from platform.errors import InputError, UserError
from platform.redaction import redact


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


Log = Callable[[str], None]
Pair = tuple[Sentence, Sentence]


# --------------------------------------------------------------------------- reading


def pair_files(prefix: str | Path, config: PrepareConfig) -> tuple[str, str]:
    """A split's two CoNLL-U files (local paths or URIs)."""
    return storage.conllu_path(prefix, config.src_lang), storage.conllu_path(prefix, config.tgt_lang)


def read_pairs(files: tuple[str, str], config: PrepareConfig) -> Iterator[Pair]:
    """The split's validated sentence pairs, read sentence by sentence from both files; a file
    with fewer or no sentences is an error at the first sentence that has no partner."""
    sides = [iter_conllu(path, fix_roots=config.fix_roots) for path in files]
    count = 0
    for src, tgt in zip_longest(*sides):
        if src is None or tgt is None:
            longer, shorter = (0, 1) if tgt is None else (1, 0)
            extra = src if tgt is None else tgt
            if count == 0:
                raise InputError(files[shorter], None, "no sentences (empty input)")
            totals = [count, count]
            totals[longer] += 1 + sum(1 for _ in sides[longer])
            raise InputError(files[longer], extra.line, f"sentence counts differ: {files[0]} has {totals[0]}, "
                                                        f"{files[1]} has {totals[1]}")
        count += 1
        yield src, tgt
    if count == 0:
        raise InputError(files[0], None, "no sentences (empty input)")


def segmentation(files: tuple[str, str]) -> dict[str, Segmenter | str]:
    """How each side's words were segmented (``data.parsing.read_segmenter`` of the split's files,
    the train split's where there is one): what ``platform.translate`` applies to raw input."""
    return {"src": read_segmenter(files[0]), "tgt": read_segmenter(files[1])}


# --------------------------------------------------------------------------- encoding


def encode_batches(pairs: Iterator[Pair], models: tuple[SubwordModel, SubwordModel], config: PrepareConfig,
                   *, filter_long: bool, stats: dict[str, int]) -> Iterator[pa.RecordBatch]:
    """The pairs encoded, ``config.row_group_size`` at a time (one Parquet row group each); long
    pairs are dropped only when ``filter_long``.  ``stats`` counts as it goes."""
    too_long = "dropped_too_long" if filter_long else "over_max_len_kept"
    for key in ("pairs_read", "pairs_written", too_long, "roots_fixed"):
        stats.setdefault(key, 0)
    for chunk in batched(pairs, config.row_group_size):
        columns = _encode_chunk(chunk, models, config, filter_long, stats)
        if columns["src_ids"]:
            yield pa.RecordBatch.from_pydict(columns, schema=ds.SCHEMA)


def _encode_chunk(chunk: Sequence[Pair], models: tuple[SubwordModel, SubwordModel], config: PrepareConfig,
                  filter_long: bool, stats: dict[str, int]) -> dict[str, list[Any]]:
    src_encoded = models[0].encode_sentences([src.words for src, _ in chunk])
    tgt_encoded = models[1].encode_sentences([tgt.words for _, tgt in chunk])
    columns: dict[str, list[Any]] = {name: [] for name in ds.SCHEMA.names}
    for (src, tgt), (src_ids, src_word), (tgt_ids, tgt_word) in zip(chunk, src_encoded, tgt_encoded):
        stats["pairs_read"] += 1
        stats["roots_fixed"] += src.roots_fixed + tgt.roots_fixed
        if max(len(src_ids), len(tgt_ids)) > config.max_len:
            stats["dropped_too_long" if filter_long else "over_max_len_kept"] += 1
            if filter_long:
                continue
        row = {**side_columns("src", src, src_ids, src_word, config.subword_head),
               **side_columns("tgt", tgt, tgt_ids, tgt_word, config.subword_head)}
        for name, value in row.items():
            columns[name].append(value)
        stats["pairs_written"] += 1
    return columns


def encode_table(prefix: str | Path, models: tuple[SubwordModel, SubwordModel], config: PrepareConfig) -> pa.Table:
    """A (small) split encoded whole, nothing filtered: evaluation data for a trained model."""
    batches = encode_batches(read_pairs(pair_files(prefix, config), config), models, config, filter_long=False,
                             stats={})
    return pa.Table.from_batches(list(batches), schema=ds.SCHEMA)


def side_columns(side: str, sentence: Sentence, ids: list[int], word: list[int], subword_head: str) -> dict[str, Any]:
    """The Parquet columns of one side of a pair (the binary tree for the source only)."""
    heads = project_heads(sentence.heads, word, subword_head)
    row = {f"{side}_ids": ids, f"{side}_heads": heads, f"{side}_word": word,
           f"{side}_depth": word_depths(sentence.heads, word),  # Omote: word depths (data/trees.py)
           f"{side}_text": sentence.text}
    if side == "src":
        row["src_tree_parent"] = binary_tree(sentence.heads, word)
    return row


# --------------------------------------------------------------------------- subwords


def learn_models(files: tuple[str, str], config: PrepareConfig, scratch: Path,
                 progress: bool) -> tuple[dict[str, bytes], int]:
    """Serialized subword models for ``src`` and ``tgt`` (the same model twice if joint), learned
    from the train split ``files``, and its pair count.

    One pass validates the pairs and counts each side's words; SentencePiece learns from those
    counts (``subwords.train_subwords``), not from the sentences.  Every word is encoded on its
    own, so the counts are all BPE learns from: its model is the one the whole corpus would give
    (checked in the tests), and memory grows with the distinct words, not with the pairs."""
    counts: dict[str, Counter[str]] = {"src": Counter(), "tgt": Counter()}
    pairs = tqdm(read_pairs(files, config), desc="read train", unit=" pair", disable=not progress, leave=False)
    count = 0
    for src, tgt in pairs:
        counts["src"].update(src.words)
        counts["tgt"].update(tgt.words)
        count += 1
    if config.joint_vocab:
        joint = train_subwords(counts["src"] + counts["tgt"], config.subwords, scratch)
        return {"src": joint, "tgt": joint}, count
    return {side: train_subwords(counts[side], config.subwords, scratch) for side in ("src", "tgt")}, count


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
    files = {split: pair_files(prefix, config) for split, prefix in prefixes.items()}
    for split in [split for split in files if split != "train"]:  # small: checked whole before the long work
        for _ in read_pairs(files[split], config):
            pass
    tmp = atomic.temporary_sibling(out)
    try:
        if subwords_from is not None:
            models_bytes = {side: ds.read_subword_model(subwords_from, side) for side in ("src", "tgt")}
        else:
            log(f"learning subwords ({config.subwords.model_type}, vocab ≤ {config.subwords.vocab_size}) "
                f"from {prefixes['train']}.{{{config.src_lang},{config.tgt_lang}}}.conllu")
            models_bytes, _ = learn_models(files["train"], config, tmp, progress)
        meta = _write_all(tmp, config, files, models_bytes, progress, log)
        meta["subwords_from"] = str(subwords_from) if subwords_from is not None else None
        meta["segmentation"] = segmentation(files.get("train") or next(iter(files.values())))
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


def _write_all(tmp: Path, config: PrepareConfig, files: dict[str, tuple[str, str]], models_bytes: dict[str, bytes],
               progress: bool, log: Log) -> dict[str, Any]:
    """Every split encoded into its Parquet file, row group by row group, and the subword models."""
    models = (SubwordModel(models_bytes["src"]), SubwordModel(models_bytes["tgt"]))
    splits = {}
    for split, pair in files.items():
        log(f"encoding {split}")
        stats: dict[str, int] = {}
        pairs = tqdm(read_pairs(pair, config), desc=f"encode {split}", unit=" pair", disable=not progress, leave=False)
        written = ds.write_split(tmp, split, encode_batches(pairs, models, config, filter_long=split == "train",
                                                            stats=stats))
        stats["sha256"] = storage.input_sha256(written)  # what the workers' node-local copies are named by
        splits[split] = {**stats, "files": [redact(str(path)) for path in pair]}
    for side, blob in models_bytes.items():
        ds.write_subword_model(tmp, side, blob)
    return {
        "format_version": ds.FORMAT_VERSION,
        "src_lang": config.src_lang,
        "tgt_lang": config.tgt_lang,
        "vocab_size": {"src": len(models[0]), "tgt": len(models[1])},
        "special_ids": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
        "splits": splits,
        "inputs_sha256": {redact(str(path)): storage.input_sha256(path) for pair in files.values() for path in pair},
        "subword_library": f"sentencepiece {sentencepiece.__version__}",
        "config": config_io.to_dict(config),
        "command": redact(shlex.join([Path(sys.executable).name, "-m", "platform.prepare", *sys.argv[1:]])),
    }


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in lists of ``size`` (the last shorter)."""
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk
