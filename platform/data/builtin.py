"""The built-in demo corpora and what ``--data`` names.

``prepare_demo`` generates the synthetic demo corpus (``data.demo``) as CoNLL-U and prepares it
through ``encode.prepare``; ``resolve_dataset`` turns a ``--data`` argument into a prepared
dataset's location: ``demo`` (``demo-large``) is prepared once into ./data/demo
(./data/demo-large), anything else must already be a prepared dataset.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from platform import config_io
from platform.data import dataset as ds
from platform.data import demo, storage
from platform.data.encode import Log, PrepareConfig, check_output, prepare
from platform.data.subwords import SubwordConfig
from platform.errors import UserError

DEMO_DIR = Path("data") / "demo"  # where ``--data demo`` is prepared, relative to the working directory
DEMO_NAMES = {"demo": "small", "demo-large": "large"}  # --data names of the built-in corpus (data/demo.LEXICONS)


def prepare_demo(
    out: str | Path, config: PrepareConfig, demo_config: demo.DemoConfig, *, overwrite: bool = False,
    progress: bool = True, log: Log = lambda m: print(m, file=sys.stderr)
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
        sizes = f"{demo_config.num_train}/{demo_config.num_dev}/{demo_config.num_test}"
        log(f"generating the synthetic demo corpus ({sizes} pairs, seed {demo_config.seed})")
        prefixes = demo.write_corpus(scratch, demo_config)
        return prepare(config, prefixes, out, overwrite=overwrite, progress=progress, log=log,
                       extra_meta={"demo": config_io.to_dict(demo_config)}, attach={"conllu": scratch})


def _existing_demo(out: Path, config: PrepareConfig, demo_config: demo.DemoConfig) -> dict[str, Any] | None:
    """The metadata of ``out`` if it is a complete demo dataset made with these exact settings."""
    meta = ds.read_meta_unchecked(out)
    if meta is None:
        return None
    same = (meta.get("format_version") == ds.FORMAT_VERSION and meta.get("demo") == config_io.to_dict(demo_config)
            and meta.get("config") == config_io.to_dict(config))
    return meta if same and all(ds.split_exists(out, split) for split in ds.SPLITS) else None


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


def prepare_default_demo(quiet: bool = False, lexicon: str = "small") -> Path:
    """A built-in demo corpus (``--data demo`` or ``demo-large``), prepared once into ./data/demo
    (./data/demo-large): 20,000/500/500 pairs with the ``demo.LEXICONS[lexicon]`` lexicon."""
    size = demo.LEXICONS[lexicon]
    config = PrepareConfig(src_lang=demo.SRC_LANG, tgt_lang=demo.TGT_LANG,
                           subwords=SubwordConfig(vocab_size=size.vocab_size))
    demo_config = demo.DemoConfig(num_nouns=size.nouns, num_verbs=size.verbs, num_adjectives=size.adjectives)
    directory = DEMO_DIR if lexicon == "small" else DEMO_DIR.with_name(f"demo-{lexicon}")
    log = (lambda m: None) if quiet else (lambda m: print(m, file=sys.stderr))
    meta = ds.read_meta_unchecked(directory)
    built_in = meta is not None and isinstance(meta.get("demo"), dict) and all(
        meta["demo"].get(key) == getattr(demo_config, key) for key in ("num_train", "num_dev", "num_test", "seed"))
    stale = built_in and _existing_demo(directory, config, demo_config) is None
    if stale:  # the built-in corpus made with other settings (not one made with --demo-sizes/--seed)
        log(f"{directory} holds the built-in demo corpus of other settings; generating it again")
    prepare_demo(directory, config, demo_config, overwrite=stale, progress=False, log=log)
    return directory.resolve()


def resolve_dataset(data: str, quiet: bool = False) -> str:
    """A ``--data`` argument as a prepared dataset's location: ``demo`` (``demo-large``) → the
    built-in corpus, prepared once into ./data/demo (./data/demo-large); else a prepared
    dataset (a local directory, made absolute, or a URI) with train and dev splits (a clear
    error otherwise)."""
    if data in DEMO_NAMES:
        return str(prepare_default_demo(quiet, lexicon=DEMO_NAMES[data]))
    location = storage.locate(data)
    ds.read_meta(location.uri)  # a clear error if it is not a prepared dataset
    for split in ("train", "dev"):
        if not ds.split_exists(location.uri, split):
            raise UserError(f"{location}: no {split}.parquet; training needs train and dev splits")
    return location.uri
