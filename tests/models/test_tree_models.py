"""Recurrent and tree encoders: seq2seq, tree2seq, hier_tree_gru (Yang et al. 2017) and
gumbel_tree (Currey & Heafield 2018)."""

import pytest
import torch
from helpers import assert_full_binary_tree
from model_helpers import random_target, select, tiny_rnn, tree_source

from models import build_model, default_config
from models.gumbel import segment_cumsum, segment_st_gumbel
from models.inputs import Source
from models.search import beam_search, greedy_search
from models.tree import TopDownGRU, TreeGRUCell, TreeSchedule, bottom_up, brackets

RNN_MODELS = ["seq2seq", "tree2seq", "hier_tree_gru", "gumbel_tree"]
# ((a b) c) in batch layout for one sentence of 3 leaves: nodes 0,1,2 leaves; 3 = (a b); 4 = root
THREE_LEAF_PARENTS = torch.tensor([[3, 3, 4, 4, -1]])


@torch.no_grad()
def induced_trees(encoder, src: Source) -> torch.Tensor:
    """The trees a Gumbel tree encoder builds (greedy selection in eval mode): parents [B, 2S-1]."""
    return encoder.compose(src)[1]


def test_tree_gru_on_a_three_leaf_tree_equals_manual_computation():
    torch.manual_seed(0)
    cell = TreeGRUCell(4)
    leaves = torch.randn(1, 3, 4)
    schedule = TreeSchedule.from_parents(THREE_LEAF_PARENTS, torch.tensor([3]))
    states, _ = bottom_up(leaves, schedule, cell, 3)

    W_g, b_g = cell.gates.weight, cell.gates.bias
    W_h, b_h = cell.candidate.weight, cell.candidate.bias

    def manual(h_l, h_r):
        gates = torch.sigmoid(W_g @ torch.cat([h_l, h_r]) + b_g)
        r_l, r_r, z = gates[:4], gates[4:8], gates[8:]
        candidate = torch.tanh(W_h @ torch.cat([r_l * h_l, r_r * h_r]) + b_h)
        return z * (h_l + h_r) / 2 + (1 - z) * candidate

    a, b, c = leaves[0]
    ab = manual(a, b)
    root = manual(ab, c)
    torch.testing.assert_close(states[0, 3], ab)
    torch.testing.assert_close(states[0, 4], root)
    torch.testing.assert_close(states[0, :3], leaves[0])


def test_schedule_batches_nodes_by_height_and_orders_children():
    src = tree_source([7, 1, 4, 6], seed=3)
    schedule = TreeSchedule.from_parents(src.tree_parent, src.lengths)
    assert sum(len(node) for _, node in schedule.up_levels) == sum(n - 1 for n in src.lengths.tolist())
    height = {}
    for h, (b, node) in enumerate(schedule.up_levels, start=1):
        for bb, nn_ in zip(b.tolist(), node.tolist()):
            height[bb, nn_] = h
            for child in (schedule.left[bb, nn_], schedule.right[bb, nn_]):
                assert height.get((bb, int(child)), 0) < h  # children are done before their parent
    assert schedule.root.tolist() == [7 + 7 - 2, 0, 7 + 4 - 2, 7 + 6 - 2]


def test_top_down_uses_distinct_left_and_right_parameters():
    torch.manual_seed(1)
    top_down = TopDownGRU(4, shared=False)
    up = torch.randn(1, 5, 4)
    schedule = TreeSchedule.from_parents(THREE_LEAF_PARENTS, torch.tensor([3]))
    before = top_down(up, schedule)
    with torch.no_grad():
        top_down.left.input.weight.add_(0.5)
    after_left = top_down(up, schedule)
    changed = [not torch.allclose(before[0, n], after_left[0, n]) for n in range(5)]
    # nodes: a(0) left of (a b); b(1) right of (a b); c(2) right of root; (a b)=3 left of root; root=4
    assert changed == [True, True, False, True, False]  # b changes only through its parent (a b)
    with torch.no_grad():
        top_down.left.input.weight.sub_(0.5)
        top_down.right.input.weight.add_(0.5)
    after_right = top_down(up, schedule)
    changed = [not torch.allclose(before[0, n], after_right[0, n]) for n in range(5)]
    assert changed == [False, True, True, False, False]


def test_straight_through_gumbel_is_one_hot_forward_and_soft_backward():
    torch.manual_seed(0)
    scores = torch.randn(9, requires_grad=True)
    segment = torch.tensor([0, 0, 0, 1, 1, 3, 3, 3, 3])  # sentence 2 has no pairs left
    y, hard = segment_st_gumbel(scores, segment, 4, tau=0.5, training=True)
    assert torch.equal(y.detach(), hard) and set(hard.tolist()) <= {0.0, 1.0}
    per_segment = torch.zeros(4).index_add(0, segment, hard)
    assert per_segment.tolist() == [1.0, 1.0, 0.0, 1.0]  # exactly one pick per segment
    (y * torch.randn(9)).sum().backward()
    assert scores.grad is not None and (scores.grad != 0).sum() >= 6  # soft backward reaches all
    evaluation, _ = segment_st_gumbel(scores.detach(), segment, 4, tau=0.5, training=False)
    expected = torch.zeros(9)
    for members in ([0, 1, 2], [3, 4], [5, 6, 7, 8]):
        expected[members[int(scores[members].argmax())]] = 1.0
    assert torch.equal(evaluation, expected)  # the greedy argmax, no noise
    values = torch.tensor([1.0, 0, 0, 0, 1, 0, 1, 0, 0])
    assert segment_cumsum(values, segment, 4).tolist() == [1, 1, 1, 0, 1, 0, 1, 1, 1]


def test_segment_cumsum_and_its_gradient_equal_torch_cumsum_per_segment():
    """The triangular matrix product (deterministic on CUDA) against ``torch.cumsum``."""
    values = torch.randn(9, requires_grad=True)
    segment = torch.tensor([0, 0, 0, 1, 1, 3, 3, 3, 3])
    expected = torch.cat([values[members].cumsum(0) for members in ([0, 1, 2], [3, 4], [5, 6, 7, 8])])
    got = segment_cumsum(values, segment, 4)
    torch.testing.assert_close(got, expected)
    weight = torch.randn(9)
    torch.testing.assert_close(torch.autograd.grad((got * weight).sum(), values)[0],
                               torch.autograd.grad((expected * weight).sum(), values)[0])


def soft_entropy(tau):
    torch.manual_seed(0)
    logits = torch.randn(2000, 8)
    uniform = torch.rand_like(logits).clamp(1e-10, 1 - 1e-10)
    soft = torch.softmax((logits - torch.log(-torch.log(uniform))) / tau, dim=-1)
    return float(-(soft * soft.clamp_min(1e-12).log()).sum(-1).mean())


def test_lower_temperature_gives_sharper_soft_selections():
    assert soft_entropy(0.1) < soft_entropy(0.5) < soft_entropy(2.0)


def test_gumbel_gradients_reach_query_and_composition_and_eval_is_deterministic():
    model = tiny_rnn("gumbel_tree").train()
    src = tree_source([6, 3, 5], seed=2)
    out = model(src, random_target(3, 4))
    out.logits.sum().backward()
    encoder = model.encoder
    assert encoder.query.grad is not None and encoder.query.grad.abs().sum() > 0
    assert encoder.cell.linear.weight.grad.abs().sum() > 0
    model.eval()
    first, second = induced_trees(encoder, src), induced_trees(encoder, src)
    assert torch.equal(first, second)
    torch.testing.assert_close(model(src, random_target(3, 4)).logits, model(src, random_target(3, 4)).logits)


@pytest.mark.parametrize("training", [True, False])
def test_induced_trees_are_valid_binary_trees(training):
    model = tiny_rnn("gumbel_tree").train(training)
    src = tree_source([7, 1, 2, 5], seed=4)
    parents = induced_trees(model.encoder, src)
    for b, n in enumerate(src.lengths.tolist()):
        assert_full_binary_tree(parents[b].tolist(), n, 7)
        assert parents[b, n:7].eq(-1).all() and parents[b, 7 + max(n - 1, 0):].eq(-1).all()
    text = brackets(parents[0].tolist(), 7, 7, list("abcdefg"))
    assert text.count("(") == 6 and "".join(ch for ch in text if ch.isalpha()) == "abcdefg"


@pytest.mark.parametrize("name", RNN_MODELS)
def test_batched_results_equal_per_sentence_results(name):
    model = tiny_rnn(name)
    src = tree_source([6, 2, 4, 1], seed=5)
    tgt = random_target(4, 5)
    batched = model(src, tgt).logits
    for b in range(4):
        alone = model(select(src, b), tgt[b:b + 1]).logits
        torch.testing.assert_close(batched[b], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", RNN_MODELS)
def test_rnn_decoding_interface(name):
    model = tiny_rnn(name)
    src = tree_source([5, 3], seed=6)
    tgt = random_target(2, 4)
    full = torch.log_softmax(model(src, tgt).logits, dim=-1)
    encoded = model.encode(src)
    state = model.start_state(encoded)
    for t in range(4):
        log_probs, state = model.step(encoded, state, tgt[:, t])
        torch.testing.assert_close(log_probs, full[:, t], atol=1e-5, rtol=1e-5)
    greedy = greedy_search(model, src, alpha=0.0, max_len_b=4)
    beam = beam_search(model, src, beam=1, alpha=0.0, max_len_b=4)
    assert [g.tokens for g in greedy] == [b[0].tokens for b in beam]


@pytest.mark.parametrize("name, cell", [("seq2seq", "lstm"), ("gumbel_tree", "lstm"), ("hier_tree_gru", "gru")])
def test_stacked_layers_decode_step_by_step_as_in_training(name, cell):
    """Currey & Heafield's 2-layer LSTMs: ``num_layers`` stacks the leaf RNN and the decoder."""
    model = tiny_rnn(name, num_layers=2, rnn_cell=cell)
    assert model.encoder.leaves.rnn.num_layers == 2 and len(model.decoder.upper_cells) == 1
    src = tree_source([5, 3], seed=6)
    tgt = random_target(2, 4)
    full = torch.log_softmax(model(src, tgt).logits, dim=-1)
    encoded = model.encode(src)
    state = model.start_state(encoded)
    assert state.hidden.shape[:2] == (2, 2)  # [B, L, H]
    for t in range(4):
        log_probs, state = model.step(encoded, state, tgt[:, t])
        torch.testing.assert_close(log_probs, full[:, t], atol=1e-5, rtol=1e-5)
    beams = beam_search(model, src, beam=3, max_len_b=4)
    assert all(len(hyps) == 3 for hyps in beams)


def perturbed(src, model, part, keys=True):
    """Outputs after adding noise to the lexical or the phrase part of the memory (and to its
    attention keys too, unless ``keys=False``)."""
    encoded = model.encode(src)
    memory = encoded.memory
    noise = torch.randn_like(memory.states) * 5
    mask = (memory.lexical if part == "lexical" else ~memory.lexical)[..., None]
    memory.states = memory.states + noise * mask
    if keys:
        encoded.keys = model.decoder.key(memory.states)
    state = model.start_state(encoded)
    return model.step(encoded, state, torch.full((src.ids.shape[0],), 2))[0]


@pytest.mark.parametrize("gate, ignored", [("fixed0", "phrase"), ("fixed1", "lexical")])
def test_fixed_gates_ignore_one_kind_of_context(gate, ignored):
    model = tiny_rnn("hier_tree_gru", gate=gate)
    src = tree_source([6, 4], seed=7)
    encoded = model.encode(src)
    reference = model.step(encoded, model.start_state(encoded), torch.full((2,), 2))[0]
    torch.manual_seed(0)
    torch.testing.assert_close(perturbed(src, model, ignored, keys=False), reference)  # its vectors count for nothing
    # ... but it still takes part in the one softmax (Yang et al. §3.4: the contexts are dependent)
    assert not torch.allclose(perturbed(src, model, ignored), reference)
    used = "lexical" if ignored == "phrase" else "phrase"
    assert not torch.allclose(perturbed(src, model, used, keys=False), reference)


def test_learned_gate_and_half_gate_use_both_contexts():
    for gate in ("fixed05", "learned"):
        model = tiny_rnn("hier_tree_gru", gate=gate)
        src = tree_source([6], seed=8)
        encoded = model.encode(src)
        reference = model.step(encoded, model.start_state(encoded), torch.full((1,), 2))[0]
        for part in ("lexical", "phrase"):
            assert not torch.allclose(perturbed(src, model, part), reference)


def test_half_gate_is_half_the_single_tree_attention():
    """Yang et al. §3.4: one attention over words and phrases; β = 0.5 gives half the original
    tree attention (their eq. 2), i.e. half of what the gate-free decoder attends to."""
    model = tiny_rnn("hier_tree_gru", gate="fixed05")
    src = tree_source([6, 4, 3], seed=8)
    encoded = model.encode(src)
    hidden, feed = torch.randn(3, model.decoder.init.out_features), torch.randn(3, model.decoder.init.out_features)
    half = model.decoder.context(encoded, hidden, feed)
    model.decoder.gate = None  # the same decoder, plain attention over all nodes (tree2seq)
    torch.testing.assert_close(half, 0.5 * model.decoder.context(encoded, hidden, feed))


def test_learned_gate_reads_the_composite_state():
    """β_t comes from h̃_{t-1} (input feeding's vector), not from the decoder RNN state: with
    the RNN state fixed, changing h̃ changes the learned gate's context and not a fixed gate's."""
    contexts = {}
    for gate in ("learned", "fixed05"):
        model = tiny_rnn("hier_tree_gru", gate=gate)
        encoded = model.encode(tree_source([6, 4], seed=9))
        hidden = torch.randn(2, model.decoder.init.out_features)
        contexts[gate] = [model.decoder.context(encoded, hidden, torch.randn(2, hidden.shape[1]) * 3) for _ in range(2)]
    assert not torch.allclose(*contexts["learned"])
    torch.testing.assert_close(*contexts["fixed05"])


@pytest.mark.parametrize("top_down", [False, True])
def test_gumbel_word_nodes_are_the_leaf_states_the_tree_composes(top_down):
    model = tiny_rnn("gumbel_tree", top_down=top_down)
    src = tree_source([5, 3], seed=4)
    leaves, _ = model.encoder.leaves(src)
    h0 = model.encoder.leaf_transform(leaves).chunk(2, dim=-1)[0] * src.valid[..., None]
    states, _ = model.encoder.compose(src)
    torch.testing.assert_close(states[:, :5], h0)  # not the BiLSTM states
    memory = model.encoder(src)
    if not top_down:
        torch.testing.assert_close(memory.states[:, :5], h0)


def test_table3_switches_and_presets():
    no_top_down = tiny_rnn("hier_tree_gru", top_down=False, bidirectional=False)
    assert no_top_down.encoder.top_down is None and not no_top_down.encoder.leaves.rnn.bidirectional
    assert default_config("hier_tree_gru").rnn_cell == "gru" and default_config("gumbel_tree").gumbel_tau == 0.5
    with pytest.raises(ValueError, match="gumbel_tau must be positive"):
        build_model(default_config("gumbel_tree", gumbel_tau=0.0), 10, 10)


def test_one_word_sentences_work_everywhere():
    for name in RNN_MODELS:
        model = tiny_rnn(name)
        src = Source(ids=torch.tensor([[5]]), lengths=torch.tensor([1]), tree_parent=torch.tensor([[-1]]),
                     depth=torch.zeros(1, 1, dtype=torch.long))
        assert torch.isfinite(model(src, random_target(1, 3)).logits).all()


@pytest.mark.parametrize("cell_name", ["gru", "lstm"])
def test_batched_bottom_up_equals_per_node_reference_with_gradients(cell_name):
    from models.tree import BinaryTreeLSTMCell, bottom_up_per_node

    torch.manual_seed(3)
    src = tree_source([7, 3, 1, 5], seed=9)
    cell = TreeGRUCell(6) if cell_name == "gru" else BinaryTreeLSTMCell(6)
    leaves = torch.randn(4, 7, 6, requires_grad=True)
    schedule = TreeSchedule.from_parents(src.tree_parent, src.lengths)
    fast, _ = bottom_up(leaves, schedule, cell, 7)
    slow = bottom_up_per_node(leaves, src.tree_parent, src.lengths, cell)
    mask = schedule.exists[..., None]
    torch.testing.assert_close(fast * mask, slow * mask)
    weights = torch.randn_like(fast) * mask
    grad_fast = torch.autograd.grad((fast * weights).sum(), [leaves] + list(cell.parameters()))
    grad_slow = torch.autograd.grad((slow * weights).sum(), [leaves] + list(cell.parameters()))
    for a, b in zip(grad_fast, grad_slow):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
