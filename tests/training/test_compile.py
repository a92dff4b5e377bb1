"""Compiled training (``TrainConfig.compile``) and the bucketed batch shapes it needs
(``batching.bucket``): padding changes no loss, the shapes stay few over an epoch of real data,
and a compiled run follows the eager run's loss curve."""

import pytest
import torch
from helpers import tiny_config

from models import MODELS
from platform.data.batching import ShardedBatches
from platform.data.dataset import PreparedDataset as Dataset
from platform.training.context import Context
from platform.training.loss import forward, loss_sums, teacher_forcing
from platform.training.step import build_training, compile_count, train_step

SUMS = ("token_loss", "token_nll", "num_tokens", "enc_loss", "enc_count", "dec_loss", "dec_count")


def batch_sums(model, batch, config):
    tgt_in, tgt_out = teacher_forcing(batch)
    return loss_sums(forward(model, batch, tgt_in), batch, tgt_out, 0.1, config.model)


@pytest.mark.parametrize("name", list(MODELS))
def test_a_bucketed_batch_has_the_loss_and_finite_gradients_of_the_same_batch_unpadded(demo_dataset, name):
    """Rows and widths padded to multiples of 8 (added rows hold one padding token of their own,
    so no query is left without a key) give the same loss terms, and no NaN gradient."""
    dataset = Dataset.open(demo_dataset)
    plain = tiny_config(name, model={"dropout": 0.0}, batching={"max_tokens": 300})
    bucketed = tiny_config(name, model={"dropout": 0.0}, batching={"max_tokens": 300, "bucket": 8})
    torch.manual_seed(0)
    model = build_training(plain, 1000, 1000, Context())[0]
    indices = next(iter(ShardedBatches(dataset.train, plain.batching))).indices.numpy()
    batches = {}
    for label, config in (("plain", plain), ("bucketed", bucketed)):
        sampler = ShardedBatches(dataset.train, config.batching)
        collate = sampler.examples.collate if not config.batching.pack else None
        batches[label] = (collate(indices, config.batching.bucket) if collate else
                          _packed(dataset, indices, config.batching))
    shapes = {label: (batch.src_ids.shape, batch.tgt_ids.shape) for label, batch in batches.items()}
    assert shapes["plain"] != shapes["bucketed"], "the batch needed no padding: the test shows nothing"
    assert all(size % 8 == 0 for shape in shapes["bucketed"] for size in shape[1 if not plain.batching.pack else 0:])
    if plain.batching.pack:  # rows were added, not only widths
        assert batches["bucketed"].src_ids.shape[0] > batches["plain"].src_ids.shape[0]
    model.eval()
    with torch.no_grad():
        sums = {label: batch_sums(model, batch, plain) for label, batch in batches.items()}
    for key in SUMS:
        torch.testing.assert_close(getattr(sums["bucketed"], key), getattr(sums["plain"], key), atol=1e-3,
                                   rtol=1e-5, msg=lambda m, key=key: f"{key}: {m}")
    model.train()
    batch_sums(model, batches["bucketed"], plain).token_loss.backward()
    bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    assert not bad, f"non-finite gradients from the padding: {bad[:3]}"


def _packed(dataset, indices, batching):
    from platform.data.packing import collate_packed

    return collate_packed(dataset.train, indices, batching.pack_width, batching.bucket)


def test_bucketed_packed_batches_come_in_a_few_shapes_over_an_epoch_of_real_data(tanaka_dataset):
    """Over an epoch of the 50k Tanaka pairs, packed token batches take 5 or more shapes (the row
    count varies with the sentences); with ``bucket`` 8 two, and at the paper's width, all rows
    are still mostly sentences."""
    dataset = Dataset.open(tanaka_dataset)
    seen = {}
    for bucket in (1, 8):
        config = tiny_config("transformer", batching={"max_tokens": 1500, "bucket": bucket})
        sampler = ShardedBatches(dataset.train, config.batching)
        shapes, real, total = set(), 0, 0
        for batch in sampler:
            shapes.add((tuple(batch.src_ids.shape), tuple(batch.tgt_ids.shape)))
            real += int((batch.rows.target.sentence >= 0).sum())
            total += batch.tgt_ids.numel()
        seen[bucket] = (len(shapes), real / total)
    assert seen[1][0] >= 5 and seen[8][0] <= 3, seen
    assert seen[8][1] > 0.75, seen


def test_fixed_shape_trains_every_epoch_of_real_data_in_one_shape_at_each_gpu_batch(tanaka_dataset):
    """At the GPU run's batches (16,384, 32,768 and 65,536 positions in rows of 48, bucket 8),
    Tanaka's batches take several shapes an epoch: the epoch's last batch is smaller, and full
    ones differ by a few rows.  ``fixed_shape`` pads each up to the epoch's largest, so a run
    records one CUDA graph: one shape in each of three epochs (here the same one), whichever
    batch the shuffle puts first (at 32,768 the small last batch comes first in epoch 0), and
    not larger than the largest batch needs; the padding adds nothing to a batch's loss (the
    bucket test above)."""
    dataset = Dataset.open(tanaka_dataset)
    for tokens, shapes in ((16384, 2), (32768, 3), (65536, 2)):  # without it, over the 3 epochs (docs/training.md)
        seen = {}
        for fixed in (False, True):
            config = tiny_config("transformer", batching={"max_tokens": tokens, "pack_width": 48, "bucket": 8,
                                                          "fixed_shape": fixed})
            sampler = ShardedBatches(dataset.train, config.batching)
            seen[fixed] = [{(tuple(batch.src_ids.shape), tuple(batch.tgt_ids.shape)) for batch in sampler}
                           for _ in range(3)]
        assert all(len(epoch) >= 2 for epoch in seen[False]) and len(set.union(*seen[False])) == shapes, tokens
        assert all(len(epoch) == 1 for epoch in seen[True]) and len(set.union(*seen[True])) == 1, (tokens, seen[True])
        (shape,) = seen[True][0]
        assert shape[0][0] == max(rows for epoch in seen[False] for (rows, _), _ in epoch)  # the largest batch's rows


@pytest.mark.slow  # an epoch of Tanaka, and inductor's compile: about 2 minutes on 2 cores
def test_compiled_updates_follow_the_eager_loss_curve_over_an_epoch_of_real_data_in_two_graphs(tanaka_dataset):
    """``compile: default`` (inductor, here on the CPU) compiles the update as ``step.compiled_update``
    says: a model with both parse heads and both relative terms (every loss, the gathers and the
    scatter-adds) trains a whole epoch of Tanaka in exactly two graphs, the loss with its
    backward and the clipping, with no graph break and no recompilation (``fixed_shape``), and
    its first updates' losses equal the eager ones from the same seed."""
    from torch._dynamo.utils import counters

    dataset = Dataset.open(tanaka_dataset)
    vocab = dataset.meta["vocab_size"]
    curves = {}
    for mode in ("off", "default"):
        # one layer each side: inductor's C++ compile time grows with the graph
        config = tiny_config("dbsa", model={"dropout": 0.0, "num_encoder_layers": 1, "num_decoder_layers": 1,
                                            "p_dec": 1, "use_rel": True, "use_dep": True},
                             batching={"max_tokens": 16384, "pack_width": 48, "bucket": 8, "fixed_shape": True},
                             compile=mode)
        model, optimizer, scheduler = build_training(config, vocab["src"], vocab["tgt"], Context())
        before, breaks = compile_count(), sum(counters["graph_break"].values())
        sampler, losses = ShardedBatches(dataset.train, config.batching), []
        for batches in sampler.updates():
            losses.append(train_step(model, optimizer, scheduler, batches, config, Context()).loss)
            if mode == "off" and len(losses) == 8:
                break
        curves[mode] = (losses, compile_count() - before, sum(counters["graph_break"].values()) - breaks)
    losses, graphs, breaks = curves["default"]
    assert len(losses) == len(ShardedBatches(dataset.train, config.batching)) > 30  # the whole epoch
    assert (graphs, breaks) == (2, 0), curves["default"][1:]
    torch.testing.assert_close(torch.tensor(losses[:8]), torch.tensor(curves["off"][0]), rtol=1e-4, atol=1e-4)
