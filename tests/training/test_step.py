"""The training step: DDP equivalence with one worker, NaN losses, the warm-up schedule."""

import os
import subprocess
import sys

import pytest
import torch
from ddp_step import config_of, saved_as
from helpers import ROOT, tiny_config

from platform.data.batching import ShardedBatches
from platform.data.dataset import PreparedDataset as Dataset
from platform.training.context import Context
from platform.training.step import build_training, inverse_sqrt_schedule, train_step

# every DDP run the tests below compare, each run once: one process for the single worker's and
# two for the two workers' (each a list of jobs, "MODEL" or "MODEL:MODE", see tests/ddp_step.py);
# the diverging run last, after the runs whose parameters are compared
ONE_WORKER = ["dbsa", "tree2seq", "hier_tree_gru", "dbsa:accumulate", "hier_tree_gru:accumulate"]
TWO_WORKERS = ["dbsa", "tree2seq", "hier_tree_gru", "dbsa:packed", "dbsa:accumulate", "hier_tree_gru:accumulate",
               "gumbel_tree", "dbsa:diverge"]


def launch(demo_dataset, directory, world: int, jobs: list[str]) -> list[subprocess.Popen]:
    """``tests/ddp_step.py`` as ``world`` gloo processes running ``jobs``, started."""
    init, out = directory / f"init-{world}", directory / f"out-{world}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return [subprocess.Popen([sys.executable, str(ROOT / "tests" / "ddp_step.py"), str(demo_dataset), str(out),
                              str(rank), str(world), str(init), *jobs], cwd=ROOT, env=env, stderr=subprocess.PIPE,
                             text=True) for rank in range(world)]


@pytest.fixture(scope="module")
def updated(demo_dataset, tmp_path_factory):
    """``{world: {job: [what each rank saved]}}`` for the jobs above (1 and 2 workers at once)."""
    directory = tmp_path_factory.mktemp("ddp")
    started = {world: launch(demo_dataset, directory, world, jobs) for world, jobs in ((1, ONE_WORKER),
                                                                                      (2, TWO_WORKERS))}
    try:
        for processes in started.values():
            for process in processes:
                _, stderr = process.communicate(timeout=300)
                assert process.returncode == 0, stderr
    finally:
        for process in [p for processes in started.values() for p in processes if p.poll() is None]:
            process.kill()
            process.wait(timeout=60)
    return {world: {job: [torch.load(saved_as(str(directory / f"out-{world}"), job, rank), weights_only=True)
                          for rank in range(world)] for job in jobs}
            for world, jobs in ((1, ONE_WORKER), (2, TWO_WORKERS))}


@pytest.mark.parametrize("model", ["dbsa", "tree2seq", "hier_tree_gru"])
def test_two_ddp_workers_update_exactly_like_one(updated, model):
    """Transformers and the tree encoders (batched tree recursions, gated GRU) alike."""
    (one,), (two, two_rank1) = updated[1][model], updated[2][model]
    assert one.keys() == two.keys()
    torch.manual_seed(1)
    initial = build_training(config_of(model), 1000, 1000, Context())[0].state_dict()
    moved = 0
    for name, value in one.items():
        torch.testing.assert_close(two[name], value, atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(two_rank1[name], two[name], atol=0, rtol=0)  # DDP keeps the ranks identical
        moved += not torch.equal(value, initial[name])
    assert moved > 10  # the updates really changed the parameters


def test_two_ddp_workers_on_packed_rows_update_exactly_like_one_on_a_sentence_per_row(updated):
    """``batching.pack`` under DDP: each rank's share packed into rows, DBSA's parse losses too."""
    (one,) = updated[1]["dbsa"]
    two, two_rank1 = updated[2]["dbsa:packed"]
    for name, value in one.items():
        torch.testing.assert_close(two[name], value, atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(two_rank1[name], two[name], atol=0, rtol=0)


@pytest.mark.parametrize("model", ["dbsa", "hier_tree_gru"])
def test_one_worker_accumulating_two_batches_updates_exactly_like_two_workers(updated, model):
    """The same global batch as 1 worker × 2 accumulated batches and as 2 workers × 1 batch
    (where DDP synchronises): the same parameters after the updates, to float tolerance; and
    2 workers × 2 accumulated batches too (DDP's no_sync on the first)."""
    (accumulated,) = updated[1][f"{model}:accumulate"]
    two_workers, _ = updated[2][model]
    two_accumulating, _ = updated[2][f"{model}:accumulate"]
    (plain,) = updated[1][model]
    for name, value in two_workers.items():
        torch.testing.assert_close(accumulated[name], value, atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(two_accumulating[name], value, atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(plain[name], value, atol=2e-6, rtol=1e-5)


def test_gumbel_tree_ranks_stay_identical_under_ddp(updated):
    """Gumbel noise is drawn per rank, so 2 workers cannot match 1 exactly; DDP must still keep
    the two ranks' parameters identical (straight-through selections leave some unused)."""
    rank0, rank1 = updated[2]["gumbel_tree"]
    for name, value in rank0.items():
        torch.testing.assert_close(rank1[name], value, atol=0, rtol=0)


def test_a_diverging_loss_stops_both_ranks_at_the_same_update(updated):
    rank0, rank1 = updated[2]["dbsa:diverge"]
    assert rank0["step"] is not None and rank0["step"] == rank1["step"]  # no rank left waiting in a collective
    assert "loss became" in rank0["reason"] and rank0["reason"] == rank1["reason"]


def test_nan_loss_fails_with_that_reason(demo_dataset):
    config = tiny_config(optim={"lr": 1e30, "warmup_steps": 0, "clip_norm": 0.0})
    dataset = Dataset.open(demo_dataset)
    model, optimizer, scheduler = build_training(config, 1000, 1000, Context())
    batches = iter(ShardedBatches(dataset.train, config.batching))
    with pytest.raises(FloatingPointError, match="loss became"):
        for _ in range(20):
            train_step(model, optimizer, scheduler, next(batches), config, Context())


def test_inverse_square_root_warmup():
    factor = inverse_sqrt_schedule(100)
    assert factor(50) == pytest.approx(0.5) and factor(100) == 1.0 and factor(400) == pytest.approx(0.5)


@pytest.mark.parametrize("dec_parse_target", ["output", "input"])
def test_a_packed_batch_has_the_loss_of_its_sentences_one_per_row(demo_dataset, dec_parse_target):
    """``batching.pack`` changes how sentences sit in rows, not what is learnt: DBSA's token and
    parse losses (heads re-indexed to row positions) and their counts equal the unpacked ones."""
    from platform.training.loss import forward, loss_sums, teacher_forcing

    config = tiny_config("dbsa", model={"dropout": 0.0, "dec_parse_target": dec_parse_target})
    assert config.batching.pack
    dataset = Dataset.open(demo_dataset)
    torch.manual_seed(0)
    model = build_training(config, 1000, 1000, Context())[0].eval()
    packed = next(iter(ShardedBatches(dataset.train, config.batching)))
    unpacked = dataset.train.collate(packed.indices.numpy())
    assert packed.src_ids.shape[0] < unpacked.src_ids.shape[0]  # several sentences per row
    sums = []
    for batch in (packed, unpacked):
        tgt_in, tgt_out = teacher_forcing(batch)
        with torch.no_grad():
            sums.append(loss_sums(forward(model, batch, tgt_in), batch, tgt_out, 0.1, config.model))
    for name in ("token_loss", "num_tokens", "enc_loss", "enc_count", "dec_loss", "dec_count"):
        torch.testing.assert_close(getattr(sums[0], name), getattr(sums[1], name), atol=1e-3, rtol=1e-5)
    assert sums[0].enc_count > 0 and sums[0].dec_count > 0
