"""CoNLL-U reading with the validation of docs/data.md.

Only what the pipeline needs is kept per sentence: word forms, heads (0-based, root = -1),
relations, the ``# text`` and ``# sent_id`` comments and the line where the sentence starts.
Multiword-token ranges (``1-2``) and empty nodes (``8.1``) are skipped, as the UD spec says.

Every problem raises :class:`~platform.errors.InputError` naming the file and the line:
wrong column count, non-integer or non-consecutive IDs, non-integer or out-of-range heads,
self-loops and cycles, zero or several roots (several roots can be repaired with
``fix_roots=True``: extra roots are attached to the first one), empty sentences, an empty
file and invalid UTF-8.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from platform.data.storage import open_text_lines
from platform.errors import InputError

NUM_COLUMNS = 10


@dataclass(frozen=True)
class Sentence:
    """One dependency tree.  ``heads[i]`` is the 0-based index of word i's head, -1 for the root."""

    words: tuple[str, ...]
    heads: tuple[int, ...]
    deprels: tuple[str, ...]
    text: str  # the ``# text`` comment, else the words joined by spaces
    sent_id: str | None
    line: int  # 1-based line of the sentence's first line (comment or word)
    roots_fixed: int = 0  # extra roots reattached by ``fix_roots``

    def __len__(self) -> int:
        return len(self.words)


def read_conllu(path: str | Path, *, fix_roots: bool = False, progress: bool = False) -> list[Sentence]:
    """Read and validate every sentence of a CoNLL-U file; an empty file is an error."""
    sentences = list(tqdm(iter_conllu(path, fix_roots=fix_roots), desc=Path(path).name, unit=" sent",
                          disable=not progress, leave=False))
    if not sentences:
        raise InputError(path, None, "no sentences (empty input)")
    return sentences


def iter_conllu(path: str | Path, *, fix_roots: bool = False) -> Iterator[Sentence]:
    block: list[tuple[int, str]] = []
    for number, line in open_text_lines(path):
        if line.strip():
            block.append((number, line))
        elif block:
            yield _parse_block(path, block, fix_roots)
            block = []
    if block:
        yield _parse_block(path, block, fix_roots)


def _parse_block(path: str | Path, block: list[tuple[int, str]], fix_roots: bool) -> Sentence:
    comments: dict[str, str] = {}
    words: list[str] = []
    raw_heads: list[int] = []
    deprels: list[str] = []
    word_lines: list[int] = []
    for number, line in block:
        if line.startswith("#"):
            key, sep, value = line[1:].partition("=")
            if sep:
                comments.setdefault(key.strip(), value.strip())
            continue
        columns = line.split("\t")
        if len(columns) != NUM_COLUMNS:
            raise InputError(path, number, f"expected {NUM_COLUMNS} tab-separated columns, found {len(columns)}")
        token_id = columns[0]
        if "-" in token_id or "." in token_id:
            _check_special_id(path, number, token_id)
            continue
        if not token_id.isdigit():
            raise InputError(path, number, f"ID {token_id!r} is not an integer")
        if int(token_id) != len(words) + 1:
            raise InputError(path, number, f"non-consecutive word ID {token_id} (expected {len(words) + 1})")
        head = columns[6]
        if not head.isdigit():
            raise InputError(path, number, f"HEAD {head!r} is not a non-negative integer")
        if not columns[1]:
            raise InputError(path, number, "empty FORM")
        words.append(columns[1])
        raw_heads.append(int(head))
        deprels.append(columns[7])
        word_lines.append(number)
    first_line = block[0][0]
    if not words:
        raise InputError(path, first_line, "sentence has no words")
    heads, fixed = _validate_heads(path, raw_heads, word_lines, first_line, fix_roots)
    return Sentence(
        words=tuple(words),
        heads=tuple(heads),
        deprels=tuple(deprels),
        text=comments.get("text") or " ".join(words),
        sent_id=comments.get("sent_id"),
        line=first_line,
        roots_fixed=fixed,
    )


def _check_special_id(path: str | Path, number: int, token_id: str) -> None:
    separator = "-" if "-" in token_id else "."
    parts = token_id.split(separator)
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise InputError(path, number, f"malformed ID {token_id!r}")


def _validate_heads(
    path: str | Path, raw_heads: list[int], word_lines: list[int], first_line: int, fix_roots: bool
) -> tuple[list[int], int]:
    """1-based CoNLL-U heads (0 = root) → 0-based heads (root = -1), validated as one tree."""
    num_words = len(raw_heads)
    for index, head in enumerate(raw_heads):
        if head > num_words:
            raise InputError(path, word_lines[index], f"HEAD {head} out of range (sentence has {num_words} words)")
        if head == index + 1:
            raise InputError(path, word_lines[index], f"word {index + 1} is its own head")
    roots = [i for i, h in enumerate(raw_heads) if h == 0]
    if not roots:
        raise InputError(path, first_line, "no root (no word has HEAD 0)")
    heads = [h - 1 for h in raw_heads]
    if len(roots) > 1:
        if not fix_roots:
            ids = ", ".join(str(r + 1) for r in roots)
            raise InputError(path, word_lines[roots[1]], f"{len(roots)} roots (words {ids} have HEAD 0); "
                             "pass --fix-roots to attach extra roots to the first")
        for extra in roots[1:]:
            heads[extra] = roots[0]
    _check_acyclic(path, heads, word_lines)
    return heads, len(roots) - 1


def _check_acyclic(path: str | Path, heads: list[int], word_lines: list[int]) -> None:
    state = [0] * len(heads)  # 0 unvisited, 1 on the current path, 2 reaches the root
    for start in range(len(heads)):
        path_nodes = []
        node = start
        while node != -1 and state[node] == 0:
            state[node] = 1
            path_nodes.append(node)
            node = heads[node]
        if node != -1 and state[node] == 1:
            cycle = path_nodes[path_nodes.index(node):] + [node]
            shown = " -> ".join(str(n + 1) for n in cycle)
            raise InputError(path, word_lines[node], f"cycle in heads: {shown}")
        for visited in path_nodes:
            state[visited] = 2
