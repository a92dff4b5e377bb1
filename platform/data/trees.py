"""Subword dependency trees: the DBSA head projection, depths, and the binary tree.

All indices are 0-based.  Word heads use -1 for the root; subword heads point the root at
itself (docs/architecture.md).

Binary tree scheme (``binary_tree``), for the tree encoders of Eriguchi et al. / Yang et al.:

1. Each word's subwords form a right-branching *lexical tree*: ``a b c`` → ``(a (b c))``.
2. A word's phrase grows from its lexical tree by joining its dependents' phrases one at a
   time, **head-outwards, nearest dependent first** (distance in words; on a tie the right
   dependent goes first).  A dependent left of the head becomes the left child of the new
   phrase node, one right of it the right child.  "My father bought a red car ." becomes
   ``((((My father) bought) (a (red car))) .)``; every phrase of a projective tree covers a
   contiguous span.
3. Node ids: ``0..n-1`` are the subwords, ``n..2n-2`` the phrase nodes in order of creation,
   so every phrase node's id is larger than its children's ids (a bottom-up pass can walk
   ids in increasing order) and the root is ``2n-2``, with parent ``-1``.
4. The parent array does not record child order; the *left* child of a phrase node is the
   one whose span has the smaller leftmost subword.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

SubwordHead = Literal["first", "last"]


def word_spans(word_of_subword: Sequence[int], num_words: int) -> tuple[list[int], list[int]]:
    """First and last subword index of every word (each word must have ≥ 1 subword)."""
    first = [-1] * num_words
    last = [-1] * num_words
    for index, word in enumerate(word_of_subword):
        if first[word] == -1:
            first[word] = index
        last[word] = index
    if -1 in first:
        raise ValueError(f"word {first.index(-1)} has no subword")
    return first, last


def project_heads(word_heads: Sequence[int], word_of_subword: Sequence[int], rule: SubwordHead = "first") -> list[int]:
    """Subword heads by the DBSA rule (Deguchi et al. 2019, §3.3).

    A non-final subword's head is the next subword of its word; a word-final subword's head is
    the first (or, with ``rule="last"``, the last) subword of the head word; the root word's
    final subword points to itself.  "Fing@@ er@@ print" under "input" gives
    ``er@@ = head(Fing@@)``, ``print = head(er@@)``, ``input = head(print)``.
    """
    first, last = word_spans(word_of_subword, len(word_heads))
    anchor = first if rule == "first" else last
    heads = []
    for index, word in enumerate(word_of_subword):
        if index != last[word]:
            heads.append(index + 1)
        elif word_heads[word] == -1:
            heads.append(index)
        else:
            heads.append(anchor[word_heads[word]])
    return heads


def depths(heads: Sequence[int]) -> list[int]:
    """Depth of every node of a tree whose root points to itself (root depth 0)."""
    depth = [-1] * len(heads)
    for start in range(len(heads)):
        chain = []
        node = start
        while depth[node] == -1 and heads[node] != node:
            chain.append(node)
            node = heads[node]
        if depth[node] == -1:  # the root
            depth[node] = 0
        for offset, member in enumerate(reversed(chain), start=1):
            depth[member] = depth[node] + offset
    return depth


def word_depths(word_heads: Sequence[int], word_of_subword: Sequence[int]) -> list[int]:
    """Omote et al.'s depths at the subword level: every subword gets its *word's* depth in the
    word dependency tree (root word 0).  Omote et al. define the relative depth on the words of
    the source tree (their Table 1); a word split into subwords does not push its dependents
    deeper, as depths computed on the DBSA subword tree (``project_heads``) would: there
    "My" under a split "father" under a split "bought" would get depth 4, not 2."""
    word_depth = depths([word if head == -1 else head for word, head in enumerate(word_heads)])
    return [word_depth[word] for word in word_of_subword]


def binary_tree(word_heads: Sequence[int], word_of_subword: Sequence[int]) -> list[int]:
    """Parent of each of the ``2n-1`` nodes of the binary tree over ``n`` subwords (module doc)."""
    num_words = len(word_heads)
    first, last = word_spans(word_of_subword, num_words)
    parent = [-1] * len(word_of_subword)
    dependents: list[list[int]] = [[] for _ in range(num_words)]
    root = -1
    for word, head in enumerate(word_heads):
        if head == -1:
            root = word
        else:
            dependents[head].append(word)

    def join(left: int, right: int) -> int:
        node = len(parent)
        parent.append(-1)
        parent[left] = parent[right] = node
        return node

    phrase = [-1] * num_words
    for word in reversed(_breadth_first(root, dependents)):  # dependents before their heads
        node = last[word]
        for piece in range(last[word] - 1, first[word] - 1, -1):  # right-branching lexical tree
            node = join(piece, node)
        for dep in sorted(dependents[word], key=lambda d: (abs(d - word), d < word)):
            node = join(phrase[dep], node) if dep < word else join(node, phrase[dep])
        phrase[word] = node
    return parent


def _breadth_first(root: int, dependents: list[list[int]]) -> list[int]:
    order = [root]
    for word in order:
        order.extend(dependents[word])
    return order
