"""Deterministic training (``TrainConfig.deterministic``).  Its CUDA failures are invisible on
the CPU: PyTorch raises for an operation with no deterministic kernel only in that operation's
CUDA kernel.  So every model's update is run here under a recorder of the operations it
dispatches (forward, losses, backward, clipping, the optimizer step; then a validation with
beam search), and none may be one
that ``torch.use_deterministic_algorithms``'s documentation says raises on CUDA."""

import pytest
import torch
from helpers import tiny_config
from torch.utils._python_dispatch import TorchDispatchMode

from models import MODELS
from platform.data.batching import ShardedBatches
from platform.data.dataset import PreparedDataset as Dataset
from platform.data.subwords import SubwordModel
from platform.training.context import Context
from platform.training.evaluate import evaluate
from platform.training.step import build_training, train_step

# aten operations whose CUDA kernels raise in deterministic mode (the "will throw a
# RuntimeError" list of torch.use_deterministic_algorithms, torch 2.13)
REFUSED = {"histc", "median", "put_", "put", "avg_pool3d_backward", "_adaptive_avg_pool2d_backward",
           "_adaptive_avg_pool3d_backward", "adaptive_max_pool2d_backward", "fractional_max_pool2d_backward",
           "fractional_max_pool3d_backward", "max_unpool2d", "max_unpool3d", "upsample_linear1d_backward",
           "upsample_bilinear2d_backward", "upsample_bicubic2d_backward", "upsample_trilinear3d_backward",
           "reflection_pad1d_backward", "reflection_pad2d_backward", "reflection_pad3d_backward",
           "_ctc_loss_backward", "grid_sampler_2d_backward", "grid_sampler_3d_backward"}
REFUSED_FLOAT = {"cumsum", "cumsum_"}  # raise for floating-point (and complex) inputs only
REFUSED_REDUCED = {"nll_loss2d_forward"}  # raise unless reduction is "none" (0)


class RefusedOnCuda(TorchDispatchMode):
    """Records every dispatched operation that deterministic CUDA would refuse."""

    def __init__(self):
        super().__init__()
        self.refused: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        first = args[0] if args else None
        floating = isinstance(first, torch.Tensor) and (first.is_floating_point() or first.is_complex())
        if (name in REFUSED or (name in REFUSED_FLOAT and floating)
                or (name in REFUSED_REDUCED and (args[3] if len(args) > 3 else 1) != 0)
                or (name == "bincount" and (kwargs or {}).get("weights", args[1] if len(args) > 1 else None)
                    is not None)
                or (name in ("scatter_reduce", "scatter_reduce_") and "prod" in map(str, args))):
            self.refused.add(name)
        return func(*args, **(kwargs or {}))


def test_the_recorder_sees_a_refused_operation():
    with RefusedOnCuda() as recorder:
        torch.arange(4).cumsum(0)  # integers: allowed
        assert not recorder.refused
        torch.arange(4.0).cumsum(0)
    assert recorder.refused == {"cumsum"}


@pytest.mark.parametrize("name", list(MODELS))
def test_no_model_update_or_validation_uses_an_operation_deterministic_cuda_refuses(demo_dataset, name):
    """An update, then a validation (teacher-forced losses, UAS, beam search), as a run does
    them with the mode on."""
    config = tiny_config(name, deterministic=True, eval={"max_sentences": 4})
    dataset = Dataset.open(demo_dataset)
    try:
        model, optimizer, scheduler = build_training(config, 1000, 1000, Context())
        assert torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
        batch = next(iter(ShardedBatches(dataset.train, config.batching)))
        with RefusedOnCuda() as recorder:
            train_step(model, optimizer, scheduler, batch, config, Context())
            evaluate(model, dataset.dev, config, SubwordModel(dataset.subword_bytes["tgt"]), dataset.meta["tgt_lang"],
                     Context())
    finally:
        build_training(tiny_config(name), 1000, 1000, Context())  # deterministic off again for the next tests
    assert not torch.are_deterministic_algorithms_enabled()
    assert not recorder.refused, f"{name}: {sorted(recorder.refused)} would raise on CUDA in deterministic mode"
