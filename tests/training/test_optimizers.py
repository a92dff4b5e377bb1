"""The optimiser families and schedules the papers' recipes use: Adam with Vaswani et al.'s
inverse square root (the Transformers), Adam at a constant rate (Currey & Heafield), AdaDelta
(Yang et al.)."""

import pytest
import torch

from platform.training.config import OptimConfig
from platform.training.step import build_optimizer


def _rates(optim: OptimConfig, steps: int) -> list[float]:
    model = torch.nn.Linear(2, 2)
    optimizer, scheduler = build_optimizer(model, optim)
    rates = []
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        rates.append(scheduler.get_last_lr()[0])
    return rates


def test_adadelta_at_its_own_scale_with_a_constant_rate():
    optim = OptimConfig(optimizer="adadelta", schedule="constant", lr=1.0, warmup_steps=0, rho=0.95, eps=1e-6)
    optimizer, _ = build_optimizer(torch.nn.Linear(2, 2), optim)
    assert isinstance(optimizer, torch.optim.Adadelta)
    assert optimizer.defaults["rho"] == 0.95 and optimizer.defaults["eps"] == 1e-6
    assert _rates(optim, 5) == [1.0] * 5


def test_a_constant_rate_after_a_linear_warm_up_and_the_inverse_square_root_decay():
    assert _rates(OptimConfig(schedule="constant", lr=1e-3, warmup_steps=4), 6) == pytest.approx(
        [2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    decayed = _rates(OptimConfig(lr=1e-3, warmup_steps=4), 16)
    assert decayed[3] == pytest.approx(1e-3) and decayed[15] == pytest.approx(1e-3 * (4 / 16) ** 0.5)
