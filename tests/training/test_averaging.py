"""Checkpoint averaging: the kept window of epoch weights and their element-wise mean."""

import pytest
import torch

from platform.training.averaging import average, epoch_files, keep_epoch


def test_the_window_keeps_the_newest_epochs_only(tmp_path):
    for epoch in range(1, 8):
        kept = keep_epoch(tmp_path, epoch, {"w": torch.full((2,), float(epoch))}, keep=3)
    assert [path.name for path in kept] == ["epoch_0005.pt", "epoch_0006.pt", "epoch_0007.pt"]
    assert epoch_files(tmp_path) == kept  # older files deleted: bounded on disk
    assert keep_epoch(tmp_path / "none", 1, {"w": torch.zeros(1)}, keep=0) == [] and not (tmp_path / "none").exists()


def test_average_is_the_element_wise_mean_and_keeps_integer_buffers_from_the_last():
    states = [{"w": torch.tensor([1.0, 2.0]), "h": torch.tensor([0.5], dtype=torch.bfloat16), "n": torch.tensor(3)},
              {"w": torch.tensor([3.0, 6.0]), "h": torch.tensor([1.5], dtype=torch.bfloat16), "n": torch.tensor(7)}]
    averaged = average(states)
    torch.testing.assert_close(averaged["w"], torch.tensor([2.0, 4.0]))
    assert averaged["h"].dtype == torch.bfloat16 and float(averaged["h"]) == 1.0
    assert int(averaged["n"]) == 7
    with pytest.raises(ValueError):
        average([])
