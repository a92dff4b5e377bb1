"""Token-budget batches: deterministic, equal steps on every rank, full coverage, exact resume."""

import numpy as np
import pytest
import torch

from models.inputs import BOS_ID, EOS_ID, PAD_ID
from platform.data import dataset as ds
from platform.data.batching import BatchingConfig, ShardedBatches


@pytest.fixture(scope="module")
def examples(demo_dataset):
    return ds.PreparedDataset.open(demo_dataset, with_dev=False).train  # what training reads


def shards(examples, world_size, **config):
    return [ShardedBatches(examples, BatchingConfig(**config), rank=r, world_size=world_size)
            for r in range(world_size)]


def test_same_seed_same_batches_other_seed_or_epoch_other_batches(examples):
    a, b, c = (ShardedBatches(examples, BatchingConfig(max_tokens=1000, seed=s)) for s in (1, 1, 2))
    same = lambda x, y: len(x) == len(y) and all(np.array_equal(p, q) for p, q in zip(x, y))  # noqa: E731
    assert same(a.batches(0), b.batches(0))
    assert not same(a.batches(0), c.batches(0))
    assert not same(a.batches(0), a.batches(1))


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("max_tokens", [64, 500, 3000])
def test_every_rank_gets_the_same_number_of_batches_and_every_example_once(examples, world_size, max_tokens):
    ranks = shards(examples, world_size, max_tokens=max_tokens)
    for epoch in (0, 1):
        per_rank = [r.batches(epoch) for r in ranks]
        assert len({len(b) for b in per_rank}) == 1
        seen = np.concatenate([batch for batches in per_rank for batch in batches])
        assert np.array_equal(np.sort(seen), np.arange(len(examples)))


def test_batches_respect_the_token_budget_and_group_similar_lengths(examples):
    (sampler,) = shards(examples, 1, max_tokens=800)
    lengths = sampler.lengths
    spreads = []
    for batch in sampler.batches(0):
        longest = lengths[batch].max()
        assert len(batch) == 1 or len(batch) * (longest + 1) <= 800
        spreads.append(longest - lengths[batch].min())
    random_spread = np.mean([np.ptp(lengths[np.random.default_rng(0).choice(len(lengths), 40)]) for _ in range(20)])
    assert np.mean(spreads) < random_spread / 3


def test_collated_batch_matches_the_rows(examples):
    (sampler,) = shards(examples, 1, max_tokens=600)
    batch = next(iter(sampler))
    for b, index in enumerate(batch.indices.tolist()):
        n = int(batch.src_lengths[b])
        assert batch.src_ids[b, :n].tolist() == examples.row("src_ids", index).tolist()
        assert torch.all(batch.src_ids[b, n:] == 0) and torch.all(batch.src_heads[b, n:] == -1)
        m = int(batch.tgt_lengths[b])
        assert batch.tgt_heads[b, :m].tolist() == examples.row("tgt_heads", index).tolist()
        # tree parents re-indexed for the padded batch: phrase nodes start at S
        S = batch.src_ids.shape[1]
        parent = examples.row("src_tree_parent", index).astype(int)
        expected = [-1 if p < 0 else p if p < n else p - n + S for p in parent]
        got = batch.src_tree_parent[b, :n].tolist() + batch.src_tree_parent[b, S:S + n - 1].tolist()
        assert got == expected


def test_restore_mid_epoch_continues_exactly(examples):
    config = dict(max_tokens=700, seed=5)
    ranks = shards(examples, 2, **config)
    reference = [[b.indices.tolist() for b in ranks[1]] for _ in range(2)]  # epochs 0 and 1
    interrupted = ShardedBatches(examples, BatchingConfig(**config), rank=1, world_size=2)
    iterator = iter(interrupted)
    consumed = [next(iterator).indices.tolist() for _ in range(4)]
    state = interrupted.state_dict()
    resumed = ShardedBatches(examples, BatchingConfig(**config), rank=1, world_size=2)
    resumed.load_state_dict(state)
    rest = [b.indices.tolist() for b in resumed]
    assert consumed + rest == reference[0]
    assert [b.indices.tolist() for b in resumed] == reference[1]  # and the next epoch follows


def test_restoring_into_a_different_setup_is_refused(examples):
    state = ShardedBatches(examples, BatchingConfig(seed=1), rank=0, world_size=2).state_dict()
    with pytest.raises(ValueError, match="world_size"):
        ShardedBatches(examples, BatchingConfig(seed=1), rank=0, world_size=4).load_state_dict(state)


def test_too_few_examples_for_the_ranks_is_an_error(examples):
    with pytest.raises(ValueError, match="cannot feed"):
        ShardedBatches(examples, BatchingConfig(), rank=0, world_size=len(examples) + 1)


def updates_of(examples, world_size, **config) -> list[list[int]]:
    """Per update: the sorted example indices it covers over all ranks (one epoch)."""
    ranks = shards(examples, world_size, **config)
    per_rank = [list(rank.updates()) for rank in ranks]
    assert len({len(updates) for updates in per_rank}) == 1  # every rank runs the same number of updates
    return [sorted(int(i) for updates in per_rank for batch in updates[u] for i in batch.indices)
            for u in range(len(per_rank[0]))]


def test_global_tokens_give_the_same_updates_whatever_the_workers(examples):
    """``global_tokens`` 3000 with batches of at most 1500 per rank: 1 worker accumulates 2
    batches, 2 workers 1 each; every update covers the same examples, and every example is
    seen once per epoch."""
    config = dict(max_tokens=1500, global_tokens=3000)
    assert BatchingConfig(**config).per_rank(1) == (1500, 2) and BatchingConfig(**config).per_rank(2) == (1500, 1)
    assert BatchingConfig(**config).per_rank(4) == (750, 1)  # smaller batches, the same update
    assert BatchingConfig(max_tokens=1000, global_tokens=4096).per_rank(1) == (819, 5)  # the fewest batches of ≤ 1000
    one, two = updates_of(examples, 1, **config), updates_of(examples, 2, **config)
    assert one == two and len(one) > 3
    assert sorted(i for update in one for i in update) == list(range(len(examples)))
    default = updates_of(examples, 2, max_tokens=1500)  # per-rank budget: twice the examples per update
    assert len(default) == len(one) and all(len(update) for update in default)
    assert len(updates_of(examples, 1, max_tokens=1500)) == 2 * len(one)  # the batch grew with the workers


def test_update_freq_and_global_tokens_are_not_both_set():
    with pytest.raises(ValueError, match="global_tokens or update_freq"):
        BatchingConfig(global_tokens=3000, update_freq=2)
    with pytest.raises(ValueError, match="update_freq"):
        BatchingConfig(update_freq=0)


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("max_tokens,global_tokens", [(700, 2100), (500, 2000), (1000, 3000), (300, 2400)])
def test_accumulated_updates_cover_every_example_once(examples, world_size, max_tokens, global_tokens):
    """Whatever the accumulation, the epoch splits into whole updates: nothing left over."""
    for seed in (1, 2, 3):
        updates = updates_of(examples, world_size, max_tokens=max_tokens, global_tokens=global_tokens, seed=seed)
        assert sorted(i for update in updates for i in update) == list(range(len(examples)))


@pytest.mark.parametrize("world_size", [1, 2])
def test_sentence_batches_hold_at_most_max_sentences_and_still_cover_every_example(examples, world_size):
    ranks = shards(examples, world_size, max_tokens=None, max_sentences=16)
    per_rank = [r.batches(0) for r in ranks]
    assert all(1 <= len(batch) <= 16 for batches in per_rank for batch in batches)
    assert sum(len(batch) == 16 for batches in per_rank for batch in batches) > len(examples) // 32  # mostly full
    seen = np.concatenate([batch for batches in per_rank for batch in batches])
    assert np.array_equal(np.sort(seen), np.arange(len(examples)))


def test_a_training_length_limit_leaves_out_exactly_the_longer_pairs(examples):
    (sampler,) = shards(examples, 1, max_tokens=800, max_length=12)
    seen = np.sort(np.concatenate(sampler.batches(0)))
    within = np.flatnonzero(np.maximum(examples.src_lengths, examples.tgt_lengths) <= 12)
    assert 0 < len(within) < len(examples) and np.array_equal(seen, within)


def test_a_batch_needs_a_token_or_a_sentence_cap():
    with pytest.raises(ValueError, match="max_tokens, max_sentences or both"):
        BatchingConfig(max_tokens=None)


def test_unsorted_batches_are_random_samples_that_still_cover_every_example_once(examples):
    """``sort_by_length: false`` (JoeyNMT's batches): a batch spans as much of the length range
    as a random sample of its size, within the token budget, each example once per epoch."""
    (sorted_,) = shards(examples, 1, max_tokens=800)
    (random_,) = shards(examples, 1, max_tokens=800, sort_by_length=False)
    lengths = random_.lengths

    def spread(sampler):
        return np.mean([np.ptp(lengths[batch]) for batch in sampler.batches(0) if len(batch) > 1])

    assert spread(random_) > 5 * spread(sorted_)
    assert all(len(b) == 1 or len(b) * (lengths[b].max() + 1) <= 800 for b in random_.batches(0))
    for world_size in (1, 3):
        ranks = shards(examples, world_size, max_tokens=800, sort_by_length=False)
        seen = np.concatenate([batch for r in ranks for batch in r.batches(1)])
        assert np.array_equal(np.sort(seen), np.arange(len(examples)))


def test_a_checkpoint_resumes_only_with_its_own_batch_order(examples):
    state = ShardedBatches(examples, BatchingConfig(sort_by_length=False)).state_dict()
    with pytest.raises(ValueError, match="sort_by_length"):
        ShardedBatches(examples, BatchingConfig()).load_state_dict(state)
    ShardedBatches(examples, BatchingConfig(sort_by_length=False)).load_state_dict(state)


def test_packed_batches_are_random_samples_within_the_budget_and_cover_every_example_once(examples):
    """``pack``: the shuffled order is kept (each batch spans the length range like a random
    sample) and a batch holds at most ``max_tokens`` positions, padding-free: Σ (length + 1)."""
    (sorted_,) = shards(examples, 1, max_tokens=800, pack=False)
    (packed,) = shards(examples, 1, max_tokens=800, pack=True)
    lengths = packed.lengths

    def spread(sampler):
        return np.mean([np.ptp(lengths[batch]) for batch in sampler.batches(0) if len(batch) > 1])

    assert spread(packed) > 5 * spread(sorted_)
    assert all(len(b) == 1 or (lengths[b] + 1).sum() <= 800 for b in packed.batches(0))
    for world_size in (1, 3):
        ranks = shards(examples, world_size, max_tokens=800, pack=True)
        seen = np.concatenate([batch for r in ranks for batch in r.batches(1)])
        assert np.array_equal(np.sort(seen), np.arange(len(examples)))


def test_a_packed_batch_holds_each_sentence_whole_in_one_row(examples):
    """Every sentence of a packed batch is in one row, source and target, with its own BOS and
    EOS, positions from 0, and rows no wider than ``pack_width`` (unless one sentence is)."""
    (sampler,) = shards(examples, 1, max_tokens=1500, pack=True, pack_width=48)
    batch = next(iter(sampler))
    rows = batch.rows
    assert batch.src_ids.shape[1] <= 48 and rows.tgt_in.shape[1] <= 48 and batch.src_ids.shape[0] < batch.num_sentences
    found = 0
    for r in range(batch.src_ids.shape[0]):
        for k in range(int(rows.source.sentence[r].max()) + 1):
            src, tgt = rows.source.sentence[r] == k, rows.target.sentence[r] == k
            index = int(batch.indices[found])
            expected_src, expected_tgt = (examples.row(name, index).tolist() for name in ("src_ids", "tgt_ids"))
            assert batch.src_ids[r, src].tolist() == expected_src
            assert batch.src_depth[r, src].tolist() == examples.row("src_depth", index).tolist()
            assert rows.tgt_in[r, tgt].tolist() == [BOS_ID, *expected_tgt]
            assert rows.tgt_out[r, tgt].tolist() == [*expected_tgt, EOS_ID]
            assert rows.source.position[r, src].tolist() == list(range(len(expected_src)))
            assert rows.target.position[r, tgt].tolist() == list(range(len(expected_tgt) + 1))
            assert len(expected_src) == int(batch.src_lengths[found])
            found += 1
    assert found == batch.num_sentences
    assert int((rows.tgt_out != PAD_ID).sum()) == batch.num_tokens  # what the loss is divided by
    assert torch.all(rows.tgt_in[rows.target.sentence < 0] == PAD_ID)


def test_packed_rows_resume_mid_epoch_with_the_next_batch(examples):
    a = ShardedBatches(examples, BatchingConfig(max_tokens=900, pack=True))
    iterator = iter(a)
    for _ in range(5):
        next(iterator)
    b = ShardedBatches(examples, BatchingConfig(max_tokens=900, pack=True))
    b.load_state_dict(a.state_dict())
    assert torch.equal(next(iter(b)).indices, next(iterator).indices)
    with pytest.raises(ValueError, match="pack"):
        ShardedBatches(examples, BatchingConfig(max_tokens=900, pack=False)).load_state_dict(a.state_dict())


@pytest.mark.parametrize("prefetch", [0, 2])
def test_prefetched_updates_are_the_samplers_in_order_and_the_position_is_the_last_taken(examples, prefetch):
    """A thread collating 2 updates ahead (or none) gives the sampler's updates in its order;
    the position to checkpoint is after the last update taken, not after what was collated."""
    from platform.data.prefetch import Prefetched

    config = BatchingConfig(max_tokens=600, update_freq=2)
    expected = [[batch.indices.tolist() for batch in update] for update in ShardedBatches(examples, config).updates()]
    sampler = ShardedBatches(examples, config)
    reader = Prefetched(sampler, prefetch)
    taken = []
    for update in reader:
        taken.append([batch.indices.tolist() for batch in update])
        if len(taken) == 3:
            break
    reader.close()
    assert taken == expected[:3]
    assert reader.state_dict()["next_batch"] == 6 and reader.wait_s >= 0.0  # 3 updates of 2 batches
    resumed = ShardedBatches(examples, config)
    resumed.load_state_dict(reader.state_dict())
    assert [[b.indices.tolist() for b in u] for u in resumed.updates()] == expected[3:]


def test_a_collation_error_in_the_thread_is_raised_where_the_updates_are_taken(examples, monkeypatch):
    from platform.data.prefetch import Prefetched

    sampler = ShardedBatches(examples, BatchingConfig(max_tokens=600))
    calls = []

    def failing(indices, bucket=1):
        calls.append(indices)
        if len(calls) == 2:
            raise ValueError("bad row")
        return type(examples).collate(examples, indices, bucket)

    monkeypatch.setattr(examples, "collate", failing)
    reader = Prefetched(sampler, 2)
    with pytest.raises(ValueError, match="bad row"):
        for _ in reader:
            pass
    reader.close()


def _first_fit_reference(src_len, tgt_len, width):
    """First fit in decreasing length, row by row in plain Python: what ``packing._first_fit``
    computes with one array comparison per sentence."""
    rows, used = [], []
    for m in sorted(range(len(src_len)), key=lambda m: -max(src_len[m], tgt_len[m])):
        for r, (s, t) in enumerate(used):
            if s + src_len[m] <= width and t + tgt_len[m] <= width:
                rows[r].append(m)
                used[r] = [s + src_len[m], t + tgt_len[m]]
                break
        else:
            rows.append([m])
            used.append([int(src_len[m]), int(tgt_len[m])])
    return rows


def test_first_fit_packs_the_rows_plain_first_fit_decreasing_would():
    from platform.data.packing import _first_fit

    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 300))
        src, tgt = rng.integers(1, 40, n), rng.integers(2, 40, n)  # many ties in length
        width = max(int(rng.integers(8, 64)), int(src.max()), int(tgt.max()))
        assert [list(map(int, row)) for row in _first_fit(src, tgt, width)] == _first_fit_reference(src, tgt, width)
