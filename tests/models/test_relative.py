"""Relative position terms (Shaw et al. 2018; Omote et al. 2019) against naive loops."""

import math

import torch

from models.layers import MultiHeadAttention, RelativeLabels
from models.relative import RelativeEmbeddings, depth_labels, position_labels

# "My father bought a red car ." word depths (root "bought" = 0), one subword per word
DEPTHS = torch.tensor([[2, 1, 0, 2, 2, 1, 1]])
OMOTE_TABLE1 = torch.tensor([  # depth(j) - depth(i): rows i, columns j
    [0, -1, -2, 0, 0, -1, -1],
    [1, 0, -1, 1, 1, 0, 0],
    [2, 1, 0, 2, 2, 1, 1],
    [0, -1, -2, 0, 0, -1, -1],
    [0, -1, -2, 0, 0, -1, -1],
    [1, 0, -1, 1, 1, 0, 0],
    [1, 0, -1, 1, 1, 0, 0],
])


def test_depth_labels_equal_omote_table1_clipped():
    for clip in (1, 2, 3):
        labels = depth_labels(DEPTHS, clip)[0] - clip  # back to signed distances
        assert torch.equal(labels, OMOTE_TABLE1.clamp(-clip, clip))
    assert depth_labels(DEPTHS, 2).min() == 0 and depth_labels(DEPTHS, 2).max() == 4  # 2l+1 labels


def test_position_labels_are_clipped_signed_distances():
    labels = position_labels(4, 6, clip=2, query_offset=1) - 2
    assert labels.tolist() == [[-1, 0, 1, 2, 2, 2], [-2, -1, 0, 1, 2, 2], [-2, -2, -1, 0, 1, 2], [-2, -2, -2, -1, 0, 1]]


def test_key_and_value_terms_equal_explicit_loops():
    torch.manual_seed(0)
    B, H, S, K, clip = 2, 3, 5, 4, 2
    table = RelativeEmbeddings(clip, K)
    q = torch.randn(B, H, S, K)
    attention = torch.softmax(torch.randn(B, H, S, S), dim=-1)
    labels = torch.randint(0, 2 * clip + 1, (B, S, S))
    with torch.no_grad():
        bias, values = table.key_bias(q, labels), table.value_term(attention, labels)
    for b in range(B):
        for h in range(H):
            for i in range(S):
                expected_value = torch.zeros(K)
                for j in range(S):
                    w_k = table.keys.weight[labels[b, i, j]].detach()
                    assert abs(float(bias[b, h, i, j]) - float(q[b, h, i] @ w_k) / math.sqrt(K)) < 1e-5
                    expected_value += attention[b, h, i, j] * table.values.weight[labels[b, i, j]].detach()
                torch.testing.assert_close(values[b, h, i], expected_value, atol=1e-5, rtol=1e-5)


def naive_relative_attention(layer, x, allowed, tables_and_labels):
    """Shaw eq. 3-4 / Omote eq. 17-22 written out per head, query and key."""
    B, S, D = x.shape
    H, K = layer.num_heads, layer.head_dim
    q = layer.query(x).view(B, S, H, K)
    k = layer.key(x).view(B, S, H, K)
    v = layer.value(x).view(B, S, H, K)
    out = torch.zeros(B, S, H, K)
    for b in range(B):
        for h in range(H):
            for i in range(S):
                scores = torch.full((S,), float("-inf"))
                for j in range(S):
                    if allowed[b, i, j]:
                        key = k[b, j, h].clone()
                        for table, labels in tables_and_labels:
                            lab = labels[i, j] if labels.dim() == 2 else labels[b, i, j]
                            if table.keys is not None:
                                key = key + table.keys.weight[lab]
                        scores[j] = q[b, i, h] @ key / math.sqrt(K)
                alpha = torch.softmax(scores, dim=0)
                for j in range(S):
                    value = v[b, j, h].clone()
                    for table, labels in tables_and_labels:
                        lab = labels[i, j] if labels.dim() == 2 else labels[b, i, j]
                        if table.values is not None:
                            value = value + table.values.weight[lab]
                    out[b, i, h] += alpha[j] * value
    return layer.output(out.reshape(B, S, D))


def test_dep_plus_rel_attention_layer_equals_the_naive_equations():
    torch.manual_seed(1)
    B, S, D, H = 2, 5, 12, 3
    rel = RelativeEmbeddings(2, D // H)
    dep = RelativeEmbeddings(1, D // H)
    layer = MultiHeadAttention(D, H, rel_position=rel, rel_depth=dep).eval()
    x = torch.randn(B, S, D)
    lengths = torch.tensor([5, 3])
    valid = torch.arange(S)[None] < lengths[:, None]
    allowed = valid[:, None, :].expand(B, S, S)
    labels = RelativeLabels(position=position_labels(S, S, 2), depth=depth_labels(torch.randint(0, 4, (B, S)), 1))
    x.requires_grad_(True)
    fast, _ = layer(x, layer.project_memory(x), allowed, labels)
    slow = naive_relative_attention(layer, x, allowed, [(rel, labels.position), (dep, labels.depth)])
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    # the gradients too (the gather's and the scatter-add's backward): every parameter's and the
    # input's gradient must be the equations' own
    weight = torch.randn_like(fast)
    parameters = [x, rel.keys.weight, rel.values.weight, dep.keys.weight, dep.values.weight, layer.query.weight]
    fast_grads = torch.autograd.grad((fast * weight).sum(), parameters)
    slow_grads = torch.autograd.grad((slow * weight).sum(), parameters)
    for got, expected in zip(fast_grads, slow_grads, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_key_only_relative_attention_uses_the_fused_path_and_matches():
    torch.manual_seed(2)
    B, S, D, H = 2, 4, 8, 2
    dep = RelativeEmbeddings(2, D // H, values=False)  # Omote Table 3: keys only
    layer = MultiHeadAttention(D, H, rel_depth=dep).eval()
    x = torch.randn(B, S, D)
    allowed = torch.ones(B, S, S, dtype=torch.bool)
    labels = RelativeLabels(depth=depth_labels(torch.randint(0, 4, (B, S)), 2))
    fast, _ = layer(x, layer.project_memory(x), allowed, labels)
    slow = naive_relative_attention(layer, x, allowed, [(dep, labels.depth)])
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
