"""Source sentences given as texts (a served model's input, ``platform.translate``'s lines): each a
CoNLL-U block, or plain text.  Plain text is segmented (and parsed) by the pipeline that segmented
the training data where it recorded one (``data.parsing.segmented``); otherwise it is words
separated by spaces, parsed with the language's spaCy pipeline (``data.parsing``, the ``parse``
extra) when the model reads source trees."""

from __future__ import annotations

import tempfile
from pathlib import Path

from platform.data.conllu import Sentence, read_conllu
from platform.errors import UserError


def source_sentences(texts: list[str], lang: str, needs_trees: bool, model: str,
                     segmenter: dict | None = None) -> list:
    """``texts`` as ``model`` (its name, for errors) reads them: CoNLL-U ``Sentence``s, or word
    lists where it reads no trees; plain texts segmented by ``segmenter`` where given."""
    if any("\t" in text for text in texts):
        if not all("\t" in text for text in texts):
            raise UserError("give every source as CoNLL-U or none")
        return conllu_sentences(texts)
    words = [text.split() for text in texts]
    for number, sentence in enumerate(words):
        if not sentence:
            raise UserError(f"source {number}: empty (one sentence per source)")
    if segmenter is not None:
        from platform.data.parsing import segmented  # spaCy: the optional [parse] extra

        sentences = conllu_sentences(segmented(texts, segmenter))
        return sentences if needs_trees else [list(sentence.words) for sentence in sentences]
    return parsed_sentences(words, lang, model) if needs_trees else words


def parsed_sentences(words: list[list[str]], lang: str, model: str) -> list[Sentence]:
    """Word lists parsed into trees with the language's default spaCy pipeline."""
    from platform.data.parsing import DEFAULT_MODELS, load_pipeline, one_tree_docs, to_conllu  # spaCy: optional

    if lang not in DEFAULT_MODELS:
        raise UserError(f"{model} reads source trees: give CoNLL-U (python -m platform.parse "
                        f"--lang {lang} --spacy-model NAME makes it)")
    nlp = load_pipeline(DEFAULT_MODELS[lang])  # a clear error without the parse extra
    joined = ["".join(sentence) if lang == "ja" else " ".join(sentence) for sentence in words]
    docs = nlp.pipe(one_tree_docs(nlp, joined, pretokenized=False))
    return conllu_sentences([to_conllu(doc, str(i), text) for i, (doc, text) in enumerate(zip(docs, joined))])


def conllu_sentences(blocks: list[str]) -> list[Sentence]:
    """CoNLL-U blocks, one sentence each, read (and checked) as ``data.conllu`` reads files."""
    with tempfile.TemporaryDirectory(prefix="nmt-src-") as scratch:
        path = Path(scratch) / "source.conllu"
        path.write_text("".join(block.strip("\n") + "\n\n" for block in blocks), encoding="utf-8")
        sentences = read_conllu(path)
    if len(sentences) != len(blocks):
        raise UserError(f"{len(blocks)} CoNLL-U sources hold {len(sentences)} sentences: give one sentence each")
    return sentences
