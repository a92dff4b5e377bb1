"""Checkpoint averaging: the kept weights (the last N checkpoints by update, the best N by
score), what a resumed run forgets, and the element-wise mean."""

import pytest
import torch

from platform.data.storage import locate
from platform.training.averaging import average, kept_files, kept_weights
from platform.training.retention import BEST, BEST_CHECKPOINT, LAST, KeptWeights


def weights(value: float) -> dict:
    return {"w": torch.full((2,), value)}


def test_the_window_keeps_the_newest_checkpoints_by_update_and_the_best_by_score(tmp_path):
    kept = KeptWeights(locate(tmp_path), last=3, best=2, mode="max")
    scores = {100: 5.0, 200: 9.0, 300: None, 400: 7.0, 500: 9.0, 1000: 1.0}  # None: a save_every checkpoint
    for step, score in scores.items():
        kept.keep(step, weights(float(step)), score)
    assert kept.names(LAST) == ["update_00000400.pt", "update_00000500.pt", "update_00001000.pt"]  # not by name
    assert [float(kept_weights(path)["w"][0]) for path in kept_files(tmp_path / LAST)] == [400.0, 500.0, 1000.0]
    # the two best validations: of the tied 9.0s, both; 300 was never validated
    assert kept.names(BEST) == ["update_00000200_score_9.pt", "update_00000500_score_9.pt"]
    assert not list(tmp_path.rglob("*.tmp*"))  # written aside, then renamed
    lowest = KeptWeights(locate(tmp_path / "loss"), last=0, best=1, mode="min")
    for step, loss in ((1, 3.5), (2, 2.25), (3, 2.5)):
        lowest.keep(step, weights(loss), loss)
    assert lowest.names(BEST) == ["update_00000002_score_2.25.pt"] and lowest.names(LAST) == []


def test_a_resumed_run_forgets_only_what_it_kept_after_its_checkpoint(tmp_path):
    kept = KeptWeights(locate(tmp_path), last=5, best=5)
    for step in (10, 20, 30, 40):
        kept.keep(step, weights(float(step)), float(step))
    kept.forget_after(20)
    assert kept.names(LAST) == ["update_00000010.pt", "update_00000020.pt"]
    assert kept.names(BEST) == ["update_00000010_score_10.pt", "update_00000020_score_20.pt"]


def test_the_best_checkpoint_before_a_new_one_stays_until_a_later_report(tmp_path):
    """A new best's Ray checkpoint may never be registered (the worker dies first): the previous
    best stays until a report after it, and a resume before the new one finds the previous."""
    kept = KeptWeights(locate(tmp_path), last=0)
    kept.keep_best_checkpoint(10, b"best at 10")
    kept.keep_best_checkpoint(30, b"best at 30")  # a new best at 30: 10's stays for now
    assert kept.names(BEST_CHECKPOINT) == ["update_00000010.pt", "update_00000030.pt"]
    kept.forget_after(20)  # the worker died before 30's checkpoint: the run resumes from 20
    assert kept.best_checkpoint().read_bytes() == b"best at 10"
    kept.keep_best_checkpoint(30, b"best at 30, again")
    kept.keep_best_checkpoint(35, b"best at 35")  # quick new bests: none of them goes
    kept.keep_best_checkpoint(40, b"best at 40")
    assert kept.names(BEST_CHECKPOINT) == ["update_00000010.pt", "update_00000030.pt", "update_00000035.pt",
                                           "update_00000040.pt"]
    kept.forget_after(25)  # a restart from a checkpoint older than all of them: 10's is still there
    assert kept.best_checkpoint().read_bytes() == b"best at 10"
    kept.keep_best_checkpoint(30, b"best at 30, again")
    kept.settle_best(30)  # a checkpoint whose best is 30 is registered
    assert kept.names(BEST_CHECKPOINT) == ["update_00000030.pt"]
    assert kept.best_checkpoint().read_bytes() == b"best at 30, again"


def test_average_is_the_element_wise_mean_and_keeps_integer_buffers_from_the_last():
    states = [{"w": torch.tensor([1.0, 2.0]), "h": torch.tensor([0.5], dtype=torch.bfloat16), "n": torch.tensor(3)},
              {"w": torch.tensor([3.0, 6.0]), "h": torch.tensor([1.5], dtype=torch.bfloat16), "n": torch.tensor(7)}]
    averaged = average(states)
    torch.testing.assert_close(averaged["w"], torch.tensor([2.0, 4.0]))
    assert averaged["h"].dtype == torch.bfloat16 and float(averaged["h"]) == 1.0
    assert int(averaged["n"]) == 7
    with pytest.raises(ValueError):
        average([])
