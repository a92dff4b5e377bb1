"""The top-down GRU of both tree models applies the reset gate before its matrix, U(r ⊙ h)
(Currey & Heafield eq. 7; Cho et al. 2014), where PyTorch's cell computes r ⊙ (U h + b)."""

import torch

from models.tree import ResetGRUCell, TopDownGRU


def test_the_candidate_is_tanh_of_w_x_plus_u_of_r_times_h():
    torch.manual_seed(0)
    cell = ResetGRUCell(3)
    x, h = torch.randn(4, 3), torch.randn(4, 3)
    w_r, w_z, w_h = cell.input.weight.chunk(3, 0)
    b_r, b_z, b_h = cell.input.bias.chunk(3, 0)
    u_r, u_z = cell.gates.weight.chunk(2, 0)
    u_h = cell.candidate.weight
    r = torch.sigmoid(x @ w_r.T + h @ u_r.T + b_r)  # eq. 5
    z = torch.sigmoid(x @ w_z.T + h @ u_z.T + b_z)  # eq. 6
    candidate = torch.tanh(x @ w_h.T + (r * h) @ u_h.T + b_h)  # eq. 7: U applied to r ⊙ h
    expected = (1 - z) * h + z * candidate  # eq. 8
    assert torch.allclose(cell(x, h), expected, atol=1e-6)
    after = torch.tanh(x @ w_h.T + r * (h @ u_h.T) + b_h)  # PyTorch's placement: r ⊙ (U h)
    assert not torch.allclose(candidate, after, atol=1e-3)  # the two forms differ


def test_the_tree_models_use_it():
    assert isinstance(TopDownGRU(4, shared=True).left, ResetGRUCell)
    assert isinstance(TopDownGRU(4, shared=False).right, ResetGRUCell)
