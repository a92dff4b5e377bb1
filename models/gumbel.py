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

Sentences that are already reduced to one node keep their state (masks).  The selected parent
of step t is phrase node ``S + t`` in the same batch layout as the given trees, so the induced
tree is a parent array like ``Source.tree_parent``.  With ``top_down`` a GRU runs from the root
down (eq. 5-8, one set of weights for left and right) and the decoder attends over the
top-down word nodes only; without it, over words and phrases (§3.4).

Shape legend: B batch, S longest sentence, L current sequence length, H node dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.inputs import Source
from models.rnn import LeafEncoder, Memory, RNNConfig
from models.tree import BinaryTreeLSTMCell, TopDownGRU, TreeSchedule, tree_memory


def st_gumbel_softmax(logits: Tensor, valid: Tensor, tau: float, training: bool) -> Tensor:
    """Straight-through Gumbel-softmax over valid positions: one-hot forward, soft backward.

    At evaluation (``training=False``) the plain argmax, without noise."""
    logits = logits.masked_fill(~valid, float("-inf"))
    if training:
        uniform = torch.rand_like(logits).clamp(1e-10, 1.0 - 1e-10)
        gumbel = -torch.log(-torch.log(uniform))
        soft = torch.softmax((logits + gumbel) / tau, dim=-1)
    else:
        soft = torch.softmax(logits, dim=-1)
    hard = F.one_hot(soft.argmax(dim=-1), logits.shape[-1]).to(soft.dtype)
    return hard - soft.detach() + soft if training else hard


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
        induced tree as parent ids [B, 2S-1] (batch layout, -1 for root and padding)."""
        leaves, _ = self.leaves(src)
        batch, width, dim = leaves.shape
        h, c = self.leaf_transform(leaves).chunk(2, dim=-1)  # [B, S, H] each
        ids = torch.arange(width, device=leaves.device).expand(batch, -1)  # node id at each position
        parent = torch.full((batch, 2 * width - 1), -1, dtype=torch.long, device=leaves.device)
        phrases = []
        for step in range(width - 1):
            h, c, ids, phrase = self._merge(h, c, ids, parent, src.lengths, step, width)
            phrases.append(phrase)
        nodes = torch.cat([leaves] + [p[:, None] for p in phrases], dim=1) if phrases else leaves
        return nodes, parent

    def _merge(self, h, c, ids, parent, lengths, step: int, width: int):
        """One merge step over all sentences: [B, L, H] → [B, L-1, H]."""
        new_h, new_c = self.cell(h[:, :-1], c[:, :-1], h[:, 1:], c[:, 1:])  # every adjacent pair
        candidates = torch.arange(h.shape[1] - 1, device=h.device)[None, :]
        active = lengths - step > 1  # [B] sentences with ≥ 2 nodes left
        valid = candidates < (lengths - step - 1)[:, None]  # [B, L-1]
        valid = valid | ~active[:, None] & (candidates == 0)  # keep softmax defined when done
        scores = new_h @ self.query  # [B, L-1], eq. 4
        select = st_gumbel_softmax(scores, valid, self.tau, self.training)  # [B, L-1]
        select = select * active[:, None].to(select.dtype)
        cumulative = select.cumsum(dim=-1)
        keep_left = (1.0 - cumulative)[..., None]  # positions left of the merge
        take_right = (cumulative - select)[..., None]  # positions right of it shift left by one
        chosen = select[..., None]
        h_next = keep_left * h[:, :-1] + chosen * new_h + take_right * h[:, 1:]
        c_next = keep_left * c[:, :-1] + chosen * new_c + take_right * c[:, 1:]
        phrase = (chosen * new_h).sum(dim=1)  # [B, H] the parent made this step
        ids_next = self._record(select, ids, parent, active, width + step)
        return h_next, c_next, ids_next, phrase

    @staticmethod
    def _record(select: Tensor, ids: Tensor, parent: Tensor, active: Tensor, new_id: int) -> Tensor:
        """Write the merged pair's parent into ``parent`` and return the new position → id map."""
        k = select.argmax(dim=-1)  # [B]
        rows = torch.nonzero(active).flatten()
        parent[rows, ids[rows, k[rows]]] = new_id
        parent[rows, ids[rows, k[rows] + 1]] = new_id
        positions = torch.arange(ids.shape[1] - 1, device=ids.device)[None, :]
        merged = torch.where(positions < k[:, None], ids[:, :-1],
                             torch.where(positions == k[:, None], torch.full_like(ids[:, :-1], new_id), ids[:, 1:]))
        return torch.where(active[:, None], merged, ids[:, :-1])

    @torch.no_grad()
    def induced_trees(self, src: Source) -> Tensor:
        """The trees the encoder builds (greedy selection when in eval mode): parents [B, 2S-1]."""
        return self.compose(src)[1]
