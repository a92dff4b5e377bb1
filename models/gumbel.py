"""Unsupervised source hierarchies: the Gumbel tree-LSTM encoder of Choi et al. 2018 as used by
Currey & Heafield 2018 (``gumbel_tree``).

Leaves: a BiLSTM over the subwords, turned into tree-LSTM states (h, c) by a linear leaf
transform.  Then n-1 merge steps; each step, for *all* sentences in one call,

1. composes every adjacent pair (k, k+1) with the binary tree-LSTM (eq. 1-3, forget bias +1);
2. scores each candidate with a learned query vector, ``v_k = q · h_k`` (eq. 4);
3. selects one with the straight-through Gumbel-softmax at temperature ``gumbel_tau`` while
   training (forward: one-hot; backward: the soft sample), the argmax at evaluation;
4. replaces the pair by the selected parent: ``h'_i = L_i h_i + y_i ĥ_i + R_i h_{i+1}`` with
   ``L = 1 − cumsum(y)``, ``R = cumsum(y) − y``.

The current nodes of all sentences are packed without padding, so each step's one cell call
covers exactly the real pairs; a sentence reduced to its root drops out.  The selected parent
of step t is phrase node ``S + t`` in the same batch layout as the given trees, so the induced
tree is a parent array like ``Source.tree_parent``.  With ``top_down`` a GRU runs from the root
down (eq. 5-8, one set of weights for left and right) and the decoder attends over the
top-down word nodes only; without it, over words and phrases (§3.4).

The word nodes the decoder attends to (and the top-down pass starts from) are the tree's
leaves, i.e. the leaf states ``h`` the tree-LSTM composes (Choi et al.'s leaf transformation
of the BiLSTM states), so every attended node is a node of the induced tree; the BiLSTM
states themselves only feed that transformation.

Shape legend: B batch, S longest sentence, P packed current nodes, Q packed pairs, H node dim.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from models.inputs import Source
from models.rnn import LeafEncoder, Memory, RNNConfig
from models.tree import BinaryTreeLSTMCell, TopDownGRU, TreeSchedule, tree_memory


def segment_st_gumbel(scores: Tensor, segment: Tensor, num_segments: int, tau: float,
                      training: bool) -> tuple[Tensor, Tensor]:
    """Straight-through Gumbel-softmax within each segment of a packed score vector [Q].

    Returns (selection, hard): ``hard`` is one-hot per segment; ``selection`` equals it in the
    forward pass and carries the soft sample's gradient (training) or is ``hard`` (evaluation)."""
    if training:
        uniform = torch.rand_like(scores).clamp(1e-10, 1.0 - 1e-10)
        scores = (scores - torch.log(-torch.log(uniform))) / tau
    top = scores.new_full((num_segments,), float("-inf")).scatter_reduce(0, segment, scores, "amax")
    index = torch.arange(len(scores), device=scores.device)
    first_top = torch.where(scores == top[segment], index, len(scores))
    winner = torch.full((num_segments,), len(scores), device=scores.device)
    winner = winner.scatter_reduce(0, segment, first_top, "amin")
    hard = (index == winner[segment]).to(scores.dtype)
    if not training:
        return hard, hard
    weights = torch.exp(scores - top[segment])
    soft = weights / scores.new_zeros(num_segments).index_add(0, segment, weights)[segment]
    return hard - soft.detach() + soft, hard


def segment_cumsum(values: Tensor, segment: Tensor, num_segments: int) -> Tensor:
    """Inclusive cumulative sum within contiguous, ascending segments of a packed vector [Q].

    The segments laid out as rows [num_segments, W] times an upper-triangular matrix of ones:
    ``torch.cumsum`` of floats has no deterministic CUDA kernel (PyTorch raises for it under
    ``TrainConfig.deterministic``), a matrix product adds in a fixed order."""
    counts = torch.bincount(segment, minlength=num_segments)  # [B] pairs per sentence
    within = torch.arange(len(values), device=values.device) - (counts.cumsum(0) - counts)[segment]  # [Q]
    width = int(counts.max())
    rows = values.new_zeros(num_segments, width).index_put((segment, within), values)  # [B, W]
    upper = torch.ones(width, width, dtype=values.dtype, device=values.device).triu()  # [W, W]: j ≤ i
    return (rows @ upper)[segment, within]  # [Q]


class GumbelTreeEncoder(nn.Module):
    def __init__(self, config: RNNConfig, vocab: int):
        super().__init__()
        dim = config.d_memory
        self.leaves = LeafEncoder(config, vocab)
        self.leaf_transform = nn.Linear(dim, 2 * dim)  # (h, c) of each word
        self.cell = BinaryTreeLSTMCell(dim)
        self.query = nn.Parameter(torch.empty(dim).normal_(0.0, dim ** -0.5))  # q, eq. 4
        self.tau = config.gumbel_tau
        self.top_down = TopDownGRU(dim, shared=True) if config.top_down else None

    def forward(self, src: Source) -> Memory:
        states, parent = self.compose(src)
        width = src.ids.shape[1]
        schedule = TreeSchedule.from_parents(parent, src.lengths)
        memory = tree_memory(states, schedule, width)
        if self.top_down is not None:
            memory.states = self.top_down(states, schedule)
            memory.valid = memory.valid & memory.lexical  # top-down word nodes only (§3.4)
        return memory

    def compose(self, src: Source) -> tuple[Tensor, Tensor]:
        """→ node states [B, 2S-1, H] (words, then the parent made at each step) and the
        induced tree as parent ids [B, 2S-1] (batch layout, -1 for root and padding).

        The current nodes of all sentences are kept *packed* ([P, H], sentence by sentence, no
        padding), so every merge step is one cell call over exactly the real adjacent pairs;
        a sentence reduced to its root drops out of the packed arrays."""
        leaves, _ = self.leaves(src)
        with torch.autocast(leaves.device.type, enabled=False):  # see _merge
            return self._compose(src, leaves.float())

    def _compose(self, src: Source, leaves: Tensor) -> tuple[Tensor, Tensor]:
        batch, width, dim = leaves.shape
        h0, c0 = self.leaf_transform(leaves).chunk(2, dim=-1)  # [B, S, H] each
        sentence, position = torch.nonzero(src.valid, as_tuple=True)  # packed order: sentence-major
        h, c = h0[sentence, position], c0[sentence, position]  # [P, H]
        ids = position  # node id of each packed node
        parent = torch.full((batch, 2 * width - 1), -1, dtype=torch.long, device=leaves.device)
        nodes = leaves.new_zeros(batch, 2 * width - 1, dim)
        nodes[:, :width] = h0 * src.valid[..., None]  # the tree's word nodes: the leaf h it composes
        for step in range(width - 1):
            pairs = torch.nonzero(sentence[:-1] == sentence[1:]).flatten()  # left node of each pair
            if pairs.numel() == 0:
                break
            h, c, sentence, ids, merged = self._merge(h, c, sentence, ids, pairs, parent, width + step, batch)
            nodes[merged[0], width + step] = merged[1]
        return nodes, parent

    def _merge(self, h, c, sentence, ids, pairs, parent, new_id: int, batch: int):
        """One merge step over every adjacent pair of every sentence: [P, H] → [Q, H], Q = #pairs.

        Runs in float32 even under autocast: the straight-through selection needs
        1 − cumsum(select) to be exactly 0 or 1 for the pairs beside the merge, which bf16's
        8-bit mantissa does not keep (and ``index_add`` on CUDA needs one dtype)."""
        left, right = pairs, pairs + 1
        segment = sentence[left]  # [Q] sentence of each candidate pair
        new_h, new_c = self.cell(h[left], c[left], h[right], c[right])  # eq. 1-3, all pairs at once
        scores = new_h @ self.query  # [Q], eq. 4
        select, hard = segment_st_gumbel(scores, segment, batch, self.tau, self.training)  # [Q]
        cumulative = segment_cumsum(select, segment, batch)
        keep_left = (1.0 - cumulative)[:, None]  # pairs left of the merge keep their left node
        take_right = (cumulative - select)[:, None]  # pairs right of it take their right node
        chosen = select[:, None]
        h_next = keep_left * h[left] + chosen * new_h + take_right * h[right]
        c_next = keep_left * c[left] + chosen * new_c + take_right * c[right]
        merged_sentences = torch.nonzero(hard).flatten()  # one pair per sentence
        rows = segment[merged_sentences]
        parent[rows, ids[left[merged_sentences]]] = new_id
        parent[rows, ids[right[merged_sentences]]] = new_id
        phrase = h.new_zeros(batch, h.shape[-1]).index_add(0, segment, chosen * new_h)  # [B, H]
        hard_cumulative = segment_cumsum(hard.to(h.dtype), segment, batch)
        ids_next = torch.where(hard_cumulative == 0, ids[left],
                               torch.where(hard.bool(), torch.full_like(ids[left], new_id), ids[right]))
        return h_next, c_next, segment, ids_next, (rows, phrase[rows])
