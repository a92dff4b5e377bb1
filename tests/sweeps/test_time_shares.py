"""Where a sweep's time went (``sweeps.summary.time_shares``), from the metrics its trials report."""

from dataclasses import dataclass

import pandas as pd
import pytest

from platform.sweeps.summary import time_line, time_shares


@dataclass
class Result:  # what time_shares reads of a Tune result: its metrics per epoch
    metrics_dataframe: pd.DataFrame


def trial(start: float, epochs: int, startup: float = 10.0, epoch_s: float = 20.0, eval_s: float = 1.0) -> Result:
    """A trial that started at ``start``: ``startup`` seconds to its first update, then epochs
    of ``epoch_s`` seconds of steps and ``eval_s`` of evaluation; Tune's whole-second timestamps."""
    first = start + startup
    ends = [first + (i + 1) * (epoch_s + eval_s) for i in range(epochs)]
    return Result(pd.DataFrame({
        "steps_s": [epoch_s] * epochs, "eval_s": [eval_s] * epochs,
        "startup_s": [startup] + [None] * (epochs - 1), "first_step_at": [first] + [None] * (epochs - 1),
        "timestamp": [int(end) for end in ends]}))


def test_two_slots_with_a_tail_where_nothing_was_left_to_run():
    # slot 1: a trial of 4 epochs (94 s); slot 2: two trials of 1 epoch (31 s each), then nothing left
    results = [trial(1000.0, 4), trial(1000.0, 1), trial(1031.0, 1)]
    ended = 1094.0
    shares = time_shares(results, launched_at=990.0, wall_s=ended - 1000.0, slots=2, ended_at=ended)
    capacity = 2 * 94.0
    assert shares["time_share_steps"] == pytest.approx(6 * 20.0 / capacity)
    assert shares["time_share_startup"] == pytest.approx(3 * 10.0 / capacity)
    assert shares["time_share_eval"] == pytest.approx(6 * 1.0 / capacity)
    # after the last start (1031 s), slot 2 was free from that trial's end (~1062.5 s) to 1094 s
    assert shares["time_share_idle"] == pytest.approx((1094.0 - 1062.5) / capacity, abs=0.01)
    assert sum(v for k, v in shares.items() if k.startswith("time_share_")) == pytest.approx(1.0)
    assert shares["launch_to_first_step_s"] == pytest.approx(20.0)
    line = time_line(shares, 2)
    assert "64% training steps (76% of the slots' time with a trial)" in line
    assert "16% idle (no trial left to start)" in line


def test_slots_that_stay_busy_to_the_end_have_no_idle_time():
    results = [trial(1000.0, 2), trial(1000.0, 2)]
    shares = time_shares(results, launched_at=1000.0, wall_s=52.0, slots=2, ended_at=1052.0)
    assert shares["time_share_idle"] == pytest.approx(0.0, abs=0.02)
    assert "of the slots' time with a trial" not in time_line(shares, 2)
