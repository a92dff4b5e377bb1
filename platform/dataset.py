"""The prepared dataset directory: file names, the Parquet schema, and readers for its metadata.

    DIR/train.parquet  dev.parquet  test.parquet   one row per sentence pair (DESIGN.md §3)
    DIR/src.model  tgt.model                        SentencePiece models (identical if joint)
    DIR/config.yaml                                 the resolved PrepareConfig
    DIR/meta.json                                   counts, vocab sizes, input hashes, command
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from platform.errors import UserError

SPLITS = ("train", "dev", "test")
META_FILE = "meta.json"
CONFIG_FILE = "config.yaml"
FORMAT_VERSION = 2
# what changed in each version, for the error that refuses an older dataset
FORMAT_CHANGES = {2: "src_depth/tgt_depth are word-level depths (Omote et al.), not subword-tree depths"}

_ids = pa.list_(pa.int32())
SCHEMA = pa.schema(
    [
        ("src_ids", _ids),
        ("tgt_ids", _ids),
        ("src_heads", _ids),
        ("tgt_heads", _ids),
        ("src_word", _ids),
        ("tgt_word", _ids),
        ("src_depth", pa.list_(pa.int16())),
        ("tgt_depth", pa.list_(pa.int16())),
        ("src_tree_parent", _ids),
        ("src_text", pa.string()),
        ("tgt_text", pa.string()),
    ]
)


def subword_model_path(directory: str | Path, side: str) -> Path:
    return Path(directory) / f"{side}.model"


def split_path(directory: str | Path, split: str) -> Path:
    return Path(directory) / f"{split}.parquet"


def read_meta(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{directory}: not a prepared dataset (no {META_FILE}); run python -m platform.prepare") from None
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: unreadable dataset metadata: {error}") from None
    if meta.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{path}: dataset format {meta.get('format_version')!r}, this code reads {FORMAT_VERSION} "
                        f"({FORMAT_CHANGES[FORMAT_VERSION]}); prepare it again")
    return meta
