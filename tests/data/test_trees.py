"""Subword heads (DBSA), relative depths (Omote et al.) and the binary tree, against the papers."""

import random

import pytest
from helpers import assert_full_binary_tree

from platform.data.trees import binary_tree, depths, project_heads, word_depths

# "My father bought a red car ." (Omote et al. 2019, Table 1), word heads 0-based, root -1
SENTENCE = ["My", "father", "bought", "a", "red", "car", "."]
HEADS = [1, 2, -1, 5, 5, 2, 2]


def test_dbsa_fingerprint_example():
    # Deguchi et al. §3.3: "Fing@@ er@@ print" whose head word is "input"
    word_heads = [1, -1]  # words: Fingerprint -> input
    pieces = ["Fing@@", "er@@", "print", "input"]
    word_of_subword = [0, 0, 0, 1]
    heads = project_heads(word_heads, word_of_subword)
    head_of = {pieces[i]: pieces[h] for i, h in enumerate(heads)}
    assert head_of["Fing@@"] == "er@@"
    assert head_of["er@@"] == "print"
    assert head_of["print"] == "input"
    assert heads[3] == 3  # the root points to itself


def test_subword_head_first_or_last_of_the_head_word():
    # "in@@ put" (word 0) is the root, "Fing@@ er@@ print" (word 1) depends on it
    word_heads = [-1, 0]
    word_of_subword = [0, 0, 1, 1, 1]
    assert project_heads(word_heads, word_of_subword, "first") == [1, 1, 3, 4, 0]
    assert project_heads(word_heads, word_of_subword, "last") == [1, 1, 3, 4, 1]


def test_omote_table1_relative_depths():
    depth = word_depths(HEADS, list(range(len(SENTENCE))))  # what prepare writes (one subword per word)
    assert depth == depths(project_heads(HEADS, list(range(len(SENTENCE)))))
    assert depth == [2, 1, 0, 2, 2, 1, 1]
    relative = [[depth[j] - depth[i] for j in range(7)] for i in range(7)]
    assert relative == [
        # My father bought a  red car  .
        [0, -1, -2, 0, 0, -1, -1],  # My
        [1, 0, -1, 1, 1, 0, 0],  # father
        [2, 1, 0, 2, 2, 1, 1],  # bought
        [0, -1, -2, 0, 0, -1, -1],  # a
        [0, -1, -2, 0, 0, -1, -1],  # red
        [1, 0, -1, 1, 1, 0, 0],  # car
        [1, 0, -1, 1, 1, 0, 0],  # .
    ]


def test_split_words_keep_their_word_depth():
    # "My fa@@ ther bou@@ ght a red car ." : "father" and "bought" split into two subwords each
    word_of_subword = [0, 1, 1, 2, 2, 3, 4, 5, 6]
    depth = word_depths(HEADS, word_of_subword)
    assert depth == [2, 1, 1, 0, 0, 2, 2, 1, 1]  # Table 1's word depths, repeated per subword
    # the DBSA subword tree would put "My" at depth 4 (My -> fa@@ -> ther -> bou@@ -> ght)
    assert depths(project_heads(HEADS, word_of_subword))[0] == 4


def bracket(parent, labels):
    children = {}
    for node, p in enumerate(parent):
        children.setdefault(p, []).append(node)
    n = len(labels)

    def leftmost(node):
        return node if node < n else min(leftmost(c) for c in children[node])

    def show(node):
        if node < n:
            return labels[node]
        left, right = sorted(children[node], key=leftmost)
        return f"({show(left)} {show(right)})"

    return show(children[-1][0])


def test_binary_tree_joins_dependents_head_outwards_nearest_first():
    parent = binary_tree(HEADS, list(range(7)))
    assert bracket(parent, SENTENCE) == "((((My father) bought) (a (red car))) .)"


def test_binary_tree_lexical_trees_are_right_branching():
    # "Fing@@ er@@ print input": input is the root
    parent = binary_tree([1, -1], [0, 0, 0, 1])
    assert bracket(parent, ["Fing@@", "er@@", "print", "input"]) == "((Fing@@ (er@@ print)) input)"


def test_equal_distance_takes_the_right_dependent_first():
    # a <- b -> c : (a (b c))
    assert bracket(binary_tree([1, -1, 1], [0, 1, 2]), ["a", "b", "c"]) == "(a (b c))"


def random_tree(rng, num_words):
    heads = [-1] * num_words
    order = list(range(num_words))
    rng.shuffle(order)
    for position, word in enumerate(order[1:], start=1):
        heads[word] = order[rng.randrange(position)]
    return heads


@pytest.mark.parametrize("seed", range(20))
def test_binary_tree_is_full_for_random_trees_and_subword_splits(seed):
    rng = random.Random(seed)
    num_words = rng.randint(1, 30)
    heads = random_tree(rng, num_words)
    word_of_subword = [w for w in range(num_words) for _ in range(rng.randint(1, 3))]
    assert_full_binary_tree(binary_tree(heads, word_of_subword), len(word_of_subword))
    sub_heads = project_heads(heads, word_of_subword, rng.choice(["first", "last"]))
    assert sum(1 for i, h in enumerate(sub_heads) if i == h) == 1
    depth = depths(sub_heads)
    assert all(depth[i] == depth[h] + 1 for i, h in enumerate(sub_heads) if i != h)


def test_projective_tree_phrases_are_contiguous_spans():
    parent = binary_tree(HEADS, list(range(7)))
    leaves = {}
    for leaf in range(7):
        node = leaf
        while node != -1:
            leaves.setdefault(node, []).append(leaf)
            node = parent[node]
    for span in leaves.values():
        assert span == list(range(min(span), max(span) + 1))
