"""A spaCy pipeline's parse of raw text as one dependency tree per line, in CoNLL-U: what
``python -m platform.parse`` writes, and how a served model that reads source trees parses
plain text (``platform.data.sources``).  spaCy comes with the optional ``[parse]`` extra.

How a file's words were segmented travels with it: ``platform.parse`` writes a ``# segmenter =
{...}`` comment (``Segmenter``: the pipeline, its version, whether the line's spaces were removed
first) on the file's first sentence; ``read_segmenter`` reads it back for ``platform.prepare``,
which records it in the dataset's meta (``PRE_SEGMENTED`` for a file without one: its words came
segmented from elsewhere), and ``segmented`` applies it to raw text at translation time.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from platform.data.storage import open_text_lines
from platform.errors import InputError, UserError

DEFAULT_MODELS = {"ja": "ja_ginza"}
SEGMENTER_COMMENT = "segmenter"
PRE_SEGMENTED = "pre-segmented"  # words that arrived segmented (CoNLL-U from elsewhere, --pretokenized)
Segmenter = dict[str, Any]  # {"pipeline": "ja_ginza", "version": "5.2.0", "strip_spaces": True}


def segmenter_of(meta: dict[str, Any], strip_spaces: bool) -> Segmenter:
    """What a pipeline with this ``meta`` (``nlp.meta`` or ``pipeline_meta``) segments with: its
    package name and version."""
    return {"pipeline": f"{meta['lang']}_{meta['name']}", "version": meta["version"], "strip_spaces": strip_spaces}


def parser_text(line: str, strip_spaces: bool) -> str:
    """What the parser reads of an input line: without spaces (GiNZA segments the text again),
    or with its whitespace collapsed to single spaces."""
    return "".join(line.split()) if strip_spaces else " ".join(line.split())


def read_segmenter(path: str | Path) -> Segmenter | str:
    """The ``# segmenter`` comment of a CoNLL-U file's first sentence, or ``PRE_SEGMENTED``."""

    for number, line in open_text_lines(path):
        if not line.startswith("#"):
            break  # the first sentence's comments are over
        key, _, value = line[1:].partition("=")
        if key.strip() == SEGMENTER_COMMENT:
            try:
                found = json.loads(value)
            except json.JSONDecodeError:
                found = None
            if not isinstance(found, dict) or not isinstance(found.get("pipeline"), str):
                raise InputError(str(path), number, f"# {SEGMENTER_COMMENT} is not the JSON platform.parse writes")
            return found
    return PRE_SEGMENTED


def segmented(texts: list[str], segmenter: Segmenter) -> list[str]:
    """Raw ``texts`` parsed as ``platform.parse`` parsed the training data (same pipeline, same
    treatment of spaces, one tree per line), as CoNLL-U blocks."""
    nlp = load_pipeline(segmenter["pipeline"])
    if nlp.meta.get("version") != segmenter.get("version"):
        warnings.warn(f"the data was segmented with {segmenter['pipeline']} {segmenter.get('version')}, "
                      f"{nlp.meta.get('version')} is installed: words may differ", stacklevel=2)
    lines = [parser_text(text, bool(segmenter.get("strip_spaces"))) for text in texts]
    docs = nlp.pipe(one_tree_docs(nlp, lines, pretokenized=False))
    return [to_conllu(doc, str(i), text) for i, (doc, text) in enumerate(zip(docs, lines))]


def parse_lines(nlp, lines: list[str], first_id: int, *, strip_spaces: bool, pretokenized: bool, batch_size: int,
                segmenter: Segmenter | None = None) -> str:
    """CoNLL-U of consecutive input ``lines`` (as read, without their line ends), one tree each,
    numbered from ``first_id``; ``segmenter`` is written on the first.  What ``platform.parse``
    writes for a shard of its input."""
    texts = [parser_text(line, strip_spaces) for line in lines]
    docs = nlp.pipe(one_tree_docs(nlp, texts, pretokenized), batch_size=batch_size)
    return "".join(to_conllu(doc, str(first_id + i), line.strip(), segmenter if i == 0 else None)
                   for i, (line, doc) in enumerate(zip(lines, docs)))


def pipeline_meta(name: str) -> dict[str, Any]:
    """A pipeline's ``meta.json`` (lang, name, version), read without loading the pipeline:
    what a parse job's workers must load, known before any of them starts."""
    spacy = _spacy()
    try:
        path = Path(name) if Path(name).is_dir() else spacy.util.get_package_path(name)
        return spacy.util.get_model_meta(path)
    except (ImportError, OSError):
        raise _not_installed(name) from None


def pipeline_digest(name: str) -> str:
    """A sha256 of every file of the pipeline (its package or directory, read in chunks): a
    pipeline retrained in place keeps its name and version, not this digest."""
    spacy = _spacy()
    try:
        root = Path(name) if Path(name).is_dir() else spacy.util.get_package_path(name)
    except ImportError:
        raise _not_installed(name) from None
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f"{path.relative_to(root)}\0".encode())
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


@cache
def load_pipeline(name: str):
    try:
        return _spacy().load(name)
    except OSError:
        raise _not_installed(name) from None


def _spacy():
    try:
        import spacy
        import spacy.util
    except ImportError:
        raise UserError("spaCy is not installed: pip install -e '.[parse]'") from None
    return spacy


def _not_installed(name: str) -> UserError:
    return UserError(f"spaCy pipeline {name!r} is not installed (for Japanese: pip install ja-ginza)")


def one_tree_docs(nlp, lines: Iterable[str], pretokenized: bool) -> Iterator:
    """Tokenized Docs whose sentence boundaries are fixed: the whole line is one sentence."""
    from spacy.tokens import Doc

    for line in lines:
        doc = Doc(nlp.vocab, words=line.split()) if pretokenized else nlp.make_doc(line)
        for token in doc[1:]:
            token.is_sent_start = False
        yield doc


def to_conllu(doc, sent_id: str, text: str, segmenter: Segmenter | None = None) -> str:
    """One parsed Doc as a CoNLL-U block (with the ``# segmenter`` comment where given); extra
    roots (should the parser make any) join the first."""
    roots = [t.i for t in doc if t.head.i == t.i]
    lines = [f"# sent_id = {sent_id}", f"# text = {text}"]
    if segmenter is not None:
        lines.append(f"# {SEGMENTER_COMMENT} = {json.dumps(segmenter, sort_keys=True)}")
    for token in doc:
        head = 0 if token.i == roots[0] else (token.head.i if token.head.i != token.i else roots[0]) + 1
        misc = "_" if token.whitespace_ else "SpaceAfter=No"
        fields = [str(token.i + 1), token.text, token.lemma_ or "_", token.pos_ or "_", token.tag_ or "_", "_",
                  str(head), token.dep_ or "dep", "_", misc]
        lines.append("\t".join(f.replace("\t", " ") or "_" for f in fields))
    return "\n".join(lines) + "\n\n"
