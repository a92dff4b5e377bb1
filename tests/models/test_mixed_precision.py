"""bf16 autocast, as training runs on CUDA, reproduced on the CPU where it can be.

On an H100 every RNN model failed its first bf16 update (docs/performance.md, "GPU"): the
leaf RNN came out of autocast in float16 (PyTorch casts cuDNN RNNs to float16 whatever the
autocast dtype), and the tree recursions wrote bf16 or float32 cell outputs into buffers of
another dtype.  These tests pin the policy that fixed it: leaf RNNs and the Gumbel merges run
in float32, tree buffers keep their dtype, and every model trains a step under autocast.
"""

import pytest
import torch
from helpers import tiny_config
from model_helpers import tree_source

from benchmarks.speed.models import random_batch
from models import MODELS, build_model, default_config
from models.rnn import LeafEncoder
from models.tree import BinaryTreeLSTMCell, TreeGRUCell, TreeSchedule, bottom_up
from platform.training.context import Context
from platform.training.step import build_optimizer, train_step


def bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def test_the_leaf_rnn_runs_outside_autocast():
    """CPU autocast leaves an LSTM in float32 anyway, so the test looks at the autocast state the
    RNN runs under: off, as it must be on CUDA (where autocast would make it float16)."""
    config = default_config("seq2seq", d_embed=16, d_hidden=8)
    leaves = LeafEncoder(config, 40)
    seen = []
    leaves.rnn.register_forward_pre_hook(lambda module, args: seen.append(torch.is_autocast_enabled("cpu")))
    with bf16():
        states, summary = leaves(tree_source([5, 3]))
    assert seen == [False]
    assert states.dtype == summary.dtype == torch.float32


class HalfGRU(TreeGRUCell):
    """A tree-GRU cell whose output comes in bf16, as a cell's does under CUDA autocast."""

    def forward(self, left, right):
        return super().forward(left, right).to(torch.bfloat16)


class HalfLSTM(BinaryTreeLSTMCell):
    def forward(self, *states):
        return tuple(t.to(torch.bfloat16) for t in super().forward(*states))


@pytest.mark.parametrize("cell", [HalfGRU(16), HalfLSTM(16)], ids=["gru", "lstm"])
def test_bottom_up_keeps_its_buffers_dtype_when_the_cell_computes_in_bf16(cell):
    src = tree_source([5, 3])
    leaves = torch.randn(2, 5, 16, requires_grad=True)  # float32, as the leaf RNN gives them
    schedule = TreeSchedule.from_parents(src.tree_parent, src.lengths)
    states, _ = bottom_up(leaves, schedule, cell, 5)
    assert states.dtype == torch.float32
    states.sum().backward()
    assert torch.isfinite(leaves.grad).all()


@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_trains_a_step_under_bf16_autocast(name):
    config = tiny_config(name)
    torch.manual_seed(0)
    model = build_model(config.model, 100, 100)
    optimizer, scheduler = build_optimizer(model, config.optim)
    batch = random_batch(4, 6, 100, "cpu")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = train_step(model, optimizer, scheduler, batch, config, Context(precision="bf16"))
    assert torch.isfinite(torch.tensor(result.loss)) and result.grad_norm > 0
    assert all(v.dtype == before[k].dtype for k, v in model.state_dict().items())  # weights stay float32
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_gumbel_merges_run_in_float32_under_autocast():
    config = default_config("gumbel_tree", d_embed=16, d_hidden=8)
    model = build_model(config, 40, 40).train()
    src = tree_source([6, 4])
    with bf16():
        states, parent = model.encoder.compose(src)
    assert states.dtype == torch.float32
    assert (parent[0] >= 0).sum() == 2 * 6 - 2  # every node but the root has a parent
