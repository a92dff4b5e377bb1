"""Subword models (SentencePiece BPE/unigram) learned on word-tokenized text.

Every word is encoded on its own, so each subword knows the word it came from; SentencePiece
splits on whitespace before it segments, so this is exactly what it would produce for the
whole sentence.  Words are encoded once per distinct type (a batched call into the C++
library, its results kept for the next call up to a bound), which keeps encoding 50k
sentences well under a second.

Special ids are fixed for every model: pad 0, unk 1, bos 2, eos 3.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from models.inputs import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # the special ids, defined once
from platform.errors import UserError


@dataclass(frozen=True, kw_only=True)
class SubwordConfig:
    vocab_size: int = 8000  # upper bound; small corpora get fewer (hard_vocab_limit=False)
    model_type: Literal["bpe", "unigram"] = "bpe"
    character_coverage: float = 1.0  # < 1 maps the rarest characters to <unk> (or bytes); 0.9995 suits CJK
    byte_fallback: bool = False  # spell unknown characters as UTF-8 bytes instead of <unk>
    # None: every core this process may use; a BPE model does not depend on it, a unigram model's
    # scores do, slightly (pin it to compare unigram models across machines)
    num_threads: int | None = None

    def __post_init__(self) -> None:
        if self.vocab_size < 8:
            raise ValueError(f"vocab_size must be at least 8, got {self.vocab_size}")
        if not 0.9 <= self.character_coverage <= 1.0:
            raise ValueError(f"character_coverage must be in [0.9, 1], got {self.character_coverage}")


def train_subwords(counts: Mapping[str, int], config: SubwordConfig, scratch: str | Path) -> bytes:
    """Learn a model from word counts (``scratch``: a directory for SentencePiece's input file);
    returns the serialized model, without the settings that say where and how it was trained
    (input path, threads), so the same data gives the same bytes.

    SentencePiece reads the counts as ``word<TAB>count`` lines (its ``tsv`` input): a BPE model
    learned so is identical to one learned on the sentences, since subwords never cross the
    spaces between words; a unigram model's scores differ slightly (its seed pieces are drawn
    from the text as a whole)."""
    path = Path(scratch) / "subword-counts.tsv"
    with open(path, "w", encoding="utf-8") as handle:
        for word in sorted(counts):
            handle.write(f"{word}\t{counts[word]}\n")
    model = io.BytesIO()
    try:
        _train(path, config, model)
    except RuntimeError as error:  # SentencePiece reports bad settings as RuntimeError
        detail = str(error).split("] ")[-1].strip()
        raise UserError(f"subword training failed: {detail}") from None
    finally:
        path.unlink()
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.getvalue())
    proto.trainer_spec.ClearField("input")
    proto.trainer_spec.ClearField("num_threads")
    return proto.SerializeToString()


def _train(path: Path, config: SubwordConfig, model: io.BytesIO) -> None:
    spm.SentencePieceTrainer.train(
        input=str(path),
        input_format="tsv",
        model_writer=model,
        vocab_size=config.vocab_size,
        hard_vocab_limit=False,
        model_type=config.model_type,
        character_coverage=config.character_coverage,
        byte_fallback=config.byte_fallback,
        normalization_rule_name="identity",  # keep the treebank's forms exactly
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        num_threads=config.num_threads or len(os.sched_getaffinity(0)),
        max_sentence_length=1 << 16,
        input_sentence_size=0,  # every word
        minloglevel=2,
    )


class SubwordModel:
    """A loaded SentencePiece model with word-aligned encoding."""

    CACHED_TYPES = 1_000_000  # word types whose encoding is kept between calls

    def __init__(self, model: bytes):
        self.processor = spm.SentencePieceProcessor(model_proto=model)
        self._pieces: dict[str, list[int]] = {}

    @classmethod
    def load(cls, path: str | Path) -> SubwordModel:
        return cls(Path(path).read_bytes())

    def __len__(self) -> int:
        return self.processor.get_piece_size()

    def encode_sentences(self, sentences: Sequence[Sequence[str]]) -> list[tuple[list[int], list[int]]]:
        """For each sentence: (subword ids, word index of each subword)."""
        pieces = self._pieces
        new_types = sorted({word for words in sentences for word in words if word not in pieces})
        if len(pieces) + len(new_types) > self.CACHED_TYPES:
            pieces.clear()  # a bounded cache: the frequent types come back within a chunk or two
            new_types = sorted({word for words in sentences for word in words})
        pieces.update(zip(new_types, self.processor.encode(new_types, out_type=int)))
        encoded = []
        for words in sentences:
            ids: list[int] = []
            word_index: list[int] = []
            for index, word in enumerate(words):
                word_ids = pieces[word] or [UNK_ID]  # never let a word vanish
                ids.extend(word_ids)
                word_index.extend([index] * len(word_ids))
            encoded.append((ids, word_index))
        return encoded

    def decode(self, ids: Sequence[int]) -> str:
        """Subword ids → detokenized text (specials dropped)."""
        return self.processor.decode([i for i in ids if i > EOS_ID or i == UNK_ID])

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.processor.id_to_piece(i) for i in ids]
