"""Tree encoders over the binary source tree: ``tree2seq`` (Eriguchi et al. 2016) and
``hier_tree_gru`` (Yang et al. 2017), with the batched schedule they share with ``gumbel_tree``.

Batch layout of the tree (``Source.tree_parent`` [B, 2S-1]): leaves ``0..S-1`` (the subwords),
phrase nodes ``S..S+n-2`` for a sentence of n subwords, root ``S+n-2`` (leaf 0 when n = 1)
with parent -1; padding -1.  Children have smaller ids than their parents.  The left child
of a phrase is the one whose span starts further left.

Speed: nothing here recurses per node.  ``TreeSchedule`` groups the phrase nodes of *all*
sentences by height (bottom-up) and by depth (top-down), so each level is one batched call
of the cell; levels are written into a node-state buffer in place.

Shape legend: B batch, S longest sentence, N = 2S-1 nodes, H node dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from models.inputs import Source
from models.rnn import LeafEncoder, Memory, RNNConfig


@dataclass
class TreeSchedule:
    left: Tensor  # [B, N] left child of each phrase node (-1 elsewhere)
    right: Tensor  # [B, N]
    parent: Tensor  # [B, N]
    is_left: Tensor  # [B, N] bool: the node is its parent's left child
    root: Tensor  # [B] root node id
    exists: Tensor  # [B, N] bool
    up_levels: list[tuple[Tensor, Tensor]]  # per height 1, 2, ...: (batch index, node id)
    down_levels: list[tuple[Tensor, Tensor]]  # per depth 1, 2, ...: (batch index, node id)

    @classmethod
    def from_parents(cls, parent: Tensor, lengths: Tensor) -> TreeSchedule:
        batch, num_nodes = parent.shape
        width = (num_nodes + 1) // 2  # S
        ids = torch.arange(num_nodes, device=parent.device)[None, :]
        exists = (ids < lengths[:, None]) | ((ids >= width) & (ids < width + lengths[:, None] - 1))
        has_parent = exists & (parent >= 0)
        root = torch.where(lengths > 1, width + lengths - 2, torch.zeros_like(lengths))
        leftmost = _propagate_up(parent, has_parent, torch.where(ids < width, ids, num_nodes).expand(batch, -1), "amin")
        height = _propagate_up(parent, has_parent, torch.zeros_like(parent), "amax", increment=1)
        left, right, is_left = _children(parent, has_parent, leftmost)
        depth = _propagate_down(parent, has_parent)
        phrase = exists & (ids >= width)
        up = [torch.nonzero(phrase & (height == h), as_tuple=True) for h in range(1, int(height.max()) + 1)]
        down = [torch.nonzero(has_parent & (depth == d), as_tuple=True) for d in range(1, int(depth.max()) + 1)]
        return cls(left, right, parent, is_left, root, exists, up, down)


def _propagate_up(parent: Tensor, has_parent: Tensor, values: Tensor, reduce: str, increment: int = 0) -> Tensor:
    """Fixed point of value[parent] = reduce(value[parent], value[child] + increment)."""
    batch, num_nodes = parent.shape
    target = torch.where(has_parent, parent, torch.full_like(parent, num_nodes))  # dummy column N
    values = values.clone()
    for _ in range(num_nodes):
        padded = torch.cat([values, values.new_zeros(batch, 1)], dim=1)
        updated = padded.scatter_reduce(1, target, values + increment, reduce=reduce, include_self=True)[:, :num_nodes]
        if torch.equal(updated, values):
            break
        values = updated
    return values


def _propagate_down(parent: Tensor, has_parent: Tensor) -> Tensor:
    """Depth of every node below its root (root 0)."""
    depth = torch.zeros_like(parent)
    safe_parent = parent.clamp(min=0)
    for _ in range(parent.shape[1]):
        updated = torch.where(has_parent, depth.gather(1, safe_parent) + 1, depth)
        if torch.equal(updated, depth):
            break
        depth = updated
    return depth


def _children(parent: Tensor, has_parent: Tensor, leftmost: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Left/right child of each phrase node: siblings ordered by their leftmost leaf."""
    batch, num_nodes = parent.shape
    b, child = torch.nonzero(has_parent, as_tuple=True)
    p = parent[b, child]
    key = (b * num_nodes + p) * (num_nodes + 1) + leftmost[b, child]
    order = torch.argsort(key)
    b, child, p = b[order], child[order], p[order]  # siblings now adjacent, left first
    left = torch.full_like(parent, -1)
    right = torch.full_like(parent, -1)
    left[b[0::2], p[0::2]] = child[0::2]
    right[b[1::2], p[1::2]] = child[1::2]
    is_left = torch.zeros_like(has_parent)
    is_left[b[0::2], child[0::2]] = True
    return left, right, is_left


class TreeGRUCell(nn.Module):
    """Bottom-up tree-GRU (Yang et al. 2017 §3.1): a reset gate per child and an update gate.

        r_L = σ(W_rL [h_L; h_R] + b),  r_R = σ(W_rR [h_L; h_R] + b),  z = σ(W_z [h_L; h_R] + b)
        h̃ = tanh(W_h [r_L ⊙ h_L; r_R ⊙ h_R] + b)
        h = z ⊙ ½(h_L + h_R) + (1 − z) ⊙ h̃

    (the carried state is the children's mean, the binary analogue of a GRU's previous state)."""

    def __init__(self, dim: int):
        super().__init__()
        self.gates = nn.Linear(2 * dim, 3 * dim)
        self.candidate = nn.Linear(2 * dim, dim)

    def forward(self, h_left: Tensor, h_right: Tensor) -> Tensor:
        reset_left, reset_right, update = torch.sigmoid(self.gates(torch.cat([h_left, h_right], -1))).chunk(3, -1)
        candidate = torch.tanh(self.candidate(torch.cat([reset_left * h_left, reset_right * h_right], -1)))
        return update * 0.5 * (h_left + h_right) + (1.0 - update) * candidate


class BinaryTreeLSTMCell(nn.Module):
    """Binary tree-LSTM (Tai et al. 2015; Choi et al. 2018 eq. 1-3), one forget gate per child,
    forget-gate bias initialised to +1:

        [i; f_L; f_R; o; g] = W [h_L; h_R] + b
        c = σ(f_L) ⊙ c_L + σ(f_R) ⊙ c_R + σ(i) ⊙ tanh(g),  h = σ(o) ⊙ tanh(c)"""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(2 * dim, 5 * dim)
        with torch.no_grad():
            self.linear.bias.zero_()
            self.linear.bias[dim:3 * dim] = 1.0  # f_L, f_R

    def forward(self, h_left: Tensor, c_left: Tensor, h_right: Tensor, c_right: Tensor) -> tuple[Tensor, Tensor]:
        i, f_left, f_right, o, g = self.linear(torch.cat([h_left, h_right], -1)).chunk(5, -1)
        c = torch.sigmoid(f_left) * c_left + torch.sigmoid(f_right) * c_right + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class ResetGRUCell(nn.Module):
    """The GRU as the papers write it (Cho et al. 2014; Currey & Heafield 2018 eq. 5-8), the
    reset gate applied to the previous state *before* its matrix:

        r = σ(W_r x + U_r h + b_r),  z = σ(W_z x + U_z h + b_z)                     (eq. 5-6)
        h̃ = tanh(W_h x + U_h (r ⊙ h) + b_h)                                         (eq. 7)
        h' = (1 − z) ⊙ h + z ⊙ h̃                                                    (eq. 8)

    PyTorch's ``nn.GRUCell`` (the cuDNN form) computes r ⊙ (U_h h + b) instead.  Yang et al.
    give no equation for their top-down GRU ("the definition of a GRU Cho et al. (2014b)"),
    whose candidate is this one.  Same parameter shapes as ``nn.GRUCell``; x is the node's
    bottom-up state, h its parent's top-down state."""

    def __init__(self, dim: int):
        super().__init__()
        self.input = nn.Linear(dim, 3 * dim)  # W_r, W_z, W_h and the biases
        self.gates = nn.Linear(dim, 2 * dim, bias=False)  # U_r, U_z
        self.candidate = nn.Linear(dim, dim, bias=False)  # U_h

    def forward(self, x: Tensor, h: Tensor) -> Tensor:
        """x, h [N, H] → h' [N, H]."""
        x_r, x_z, x_h = self.input(x).chunk(3, -1)
        h_r, h_z = self.gates(h).chunk(2, -1)
        reset, update = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
        candidate = torch.tanh(x_h + self.candidate(reset * h))
        return (1.0 - update) * h + update * candidate


class TopDownGRU(nn.Module):
    """Top-down pass: h↓_root = h↑_root; h↓_c = GRU_side(h↑_c, h↓_parent) for each child c.

    Yang et al. use *different* parameters for left and right children (``shared=False``);
    Currey & Heafield (eq. 5-8) share them (``shared=True``).  Both are the papers' GRU,
    ``ResetGRUCell`` (eq. 7's U(r ⊙ h))."""

    def __init__(self, dim: int, shared: bool):
        super().__init__()
        self.left = ResetGRUCell(dim)
        self.right = self.left if shared else ResetGRUCell(dim)

    def forward(self, up: Tensor, schedule: TreeSchedule) -> Tensor:
        """up [B, N, H] bottom-up states → top-down states [B, N, H]."""
        down = torch.zeros_like(up)
        batch = torch.arange(up.shape[0], device=up.device)
        down[batch, schedule.root] = up[batch, schedule.root]
        for b, node in schedule.down_levels:
            parent = schedule.parent[b, node]
            left = schedule.is_left[b, node]
            new = torch.empty_like(up[b, node])
            for mask, cell in ((left, self.left), (~left, self.right)):
                if mask.any():
                    new[mask] = cell(up[b[mask], node[mask]], down[b[mask], parent[mask]]).to(new.dtype)
            down[b, node] = new
        return down


def bottom_up(leaves: Tensor, schedule: TreeSchedule, cell: nn.Module, width: int) -> tuple[Tensor, Tensor | None]:
    """Compose phrase nodes level by level. leaves [B, S, H] → node states [B, N, H] (and cells)."""
    batch, _, dim = leaves.shape
    num_nodes = 2 * width - 1
    lstm = isinstance(cell, BinaryTreeLSTMCell)
    h = leaves.new_zeros(batch, num_nodes, dim)
    h[:, :width] = leaves
    c = leaves.new_zeros(batch, num_nodes, dim) if lstm else None  # leaf memory cells start at 0
    for b, node in schedule.up_levels:
        left, right = schedule.left[b, node], schedule.right[b, node]
        if lstm:
            new_h, new_c = cell(h[b, left], c[b, left], h[b, right], c[b, right])
            h[b, node], c[b, node] = new_h.to(h.dtype), new_c.to(c.dtype)  # bf16 under autocast
        else:
            h[b, node] = cell(h[b, left], h[b, right]).to(h.dtype)
    return h, c


def tree_memory(states: Tensor, schedule: TreeSchedule, width: int) -> Memory:
    ids = torch.arange(states.shape[1], device=states.device)
    lexical = (ids < width)[None].expand(states.shape[0], -1)
    summary = states[torch.arange(states.shape[0], device=states.device), schedule.root]  # the root
    return Memory(states=states, valid=schedule.exists, lexical=lexical, summary=summary)


class Tree2SeqEncoder(nn.Module):
    """Eriguchi et al. 2016: sequential leaves, bottom-up tree-LSTM (or tree-GRU); the decoder
    attends over words and phrases and starts from the root."""

    def __init__(self, config: RNNConfig, vocab: int):
        super().__init__()
        self.leaves = LeafEncoder(config, vocab)
        dim = config.d_memory
        self.cell = BinaryTreeLSTMCell(dim) if config.tree_cell == "lstm" else TreeGRUCell(dim)

    def forward(self, src: Source) -> Memory:
        leaves, _ = self.leaves(src)
        schedule = TreeSchedule.from_parents(src.tree_parent, src.lengths)
        states, _ = bottom_up(leaves, schedule, self.cell, src.ids.shape[1])
        return tree_memory(states, schedule, src.ids.shape[1])


class HierTreeGRUEncoder(nn.Module):
    """Yang et al. 2017: (bi)directional leaf GRU, bottom-up tree-GRU, then (optionally) a
    top-down GRU with separate left/right parameters; final node states = top-down states.
    Rare words are encoded through their subword lexical trees, which are part of the data."""

    def __init__(self, config: RNNConfig, vocab: int):
        super().__init__()
        self.leaves = LeafEncoder(config, vocab)
        self.cell = TreeGRUCell(config.d_memory)
        self.top_down = TopDownGRU(config.d_memory, shared=False) if config.top_down else None

    def forward(self, src: Source) -> Memory:
        leaves, _ = self.leaves(src)
        width = src.ids.shape[1]
        schedule = TreeSchedule.from_parents(src.tree_parent, src.lengths)
        states, _ = bottom_up(leaves, schedule, self.cell, width)
        memory = tree_memory(states, schedule, width)  # summary = bottom-up root
        if self.top_down is not None:
            memory.states = self.top_down(states, schedule)
        return memory


def brackets(parent: list[int], length: int, width: int, tokens: list[str]) -> str:
    """One sentence's tree (batch layout) as nested brackets over ``tokens``."""
    children: dict[int, list[int]] = {}
    for node, p in enumerate(parent):
        if p >= 0:
            children.setdefault(p, []).append(node)

    def leftmost(node: int) -> int:
        return node if node < width else min(leftmost(c) for c in children[node])

    def show(node: int) -> str:
        if node < width:
            return tokens[node]
        left, right = sorted(children[node], key=leftmost)
        return f"({show(left)} {show(right)})"

    return show(width + length - 2 if length > 1 else 0)


def bottom_up_per_node(leaves: Tensor, parent: Tensor, lengths: Tensor, cell: nn.Module) -> Tensor:
    """Reference: one sentence and one node at a time (what the batched schedule replaces).

    Used by the tests (equal values and gradients) and by ``benchmarks.speed`` (batched vs per-sentence)."""
    width = leaves.shape[1]
    lstm = isinstance(cell, BinaryTreeLSTMCell)
    sentences = []
    for b, n in enumerate(lengths.tolist()):
        h = {i: leaves[b, i] for i in range(n)}
        c = {i: torch.zeros_like(leaves[b, i]) for i in range(n)}
        children: dict[int, list[int]] = {}
        for node in list(range(n)) + list(range(width, width + n - 1)):
            if int(parent[b, node]) >= 0:
                children.setdefault(int(parent[b, node]), []).append(node)
        leftmost = {i: i for i in range(n)}
        for node in range(width, width + n - 1):  # ids grow bottom-up
            left, right = sorted(children[node], key=lambda x: leftmost[x])
            leftmost[node] = leftmost[left]
            if lstm:
                h_new, c_new = cell(h[left][None], c[left][None], h[right][None], c[right][None])
                h[node], c[node] = h_new[0], c_new[0]
            else:
                h[node] = cell(h[left][None], h[right][None])[0]
        rows = [h.get(i, leaves.new_zeros(leaves.shape[-1])) for i in range(2 * width - 1)]
        sentences.append(torch.stack(rows))
    return torch.stack(sentences)
