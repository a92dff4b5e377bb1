"""A spaCy pipeline's parse of raw text as one dependency tree per line, in CoNLL-U: what
``python -m platform.parse`` writes, and how a served model that reads source trees parses
plain text (``platform.data.sources``).  spaCy comes with the optional ``[parse]`` extra.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from platform.errors import UserError

DEFAULT_MODELS = {"ja": "ja_ginza"}


def load_pipeline(name: str):
    try:
        import spacy
    except ImportError:
        raise UserError("spaCy is not installed: pip install -e '.[parse]'") from None
    try:
        return spacy.load(name)
    except OSError:
        raise UserError(f"spaCy pipeline {name!r} is not installed (for Japanese: pip install ja-ginza)") from None


def one_tree_docs(nlp, lines: Iterable[str], pretokenized: bool) -> Iterator:
    """Tokenized Docs whose sentence boundaries are fixed: the whole line is one sentence."""
    from spacy.tokens import Doc

    for line in lines:
        doc = Doc(nlp.vocab, words=line.split()) if pretokenized else nlp.make_doc(line)
        for token in doc[1:]:
            token.is_sent_start = False
        yield doc


def to_conllu(doc, sent_id: str, text: str) -> str:
    """One parsed Doc as a CoNLL-U block; extra roots (should the parser make any) join the first."""
    roots = [t.i for t in doc if t.head.i == t.i]
    lines = [f"# sent_id = {sent_id}", f"# text = {text}"]
    for token in doc:
        head = 0 if token.i == roots[0] else (token.head.i if token.head.i != token.i else roots[0]) + 1
        misc = "_" if token.whitespace_ else "SpaceAfter=No"
        fields = [str(token.i + 1), token.text, token.lemma_ or "_", token.pos_ or "_", token.tag_ or "_", "_",
                  str(head), token.dep_ or "dep", "_", misc]
        lines.append("\t".join(f.replace("\t", " ") or "_" for f in fields))
    return "\n".join(lines) + "\n\n"
