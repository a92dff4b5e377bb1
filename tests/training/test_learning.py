"""The Quickstart's setting learns the demo corpus: the dbsa sweep's first point (the paper's
parse-head setting at the sweep size) trained for about 200 steps, with a low floor that
catches "learns nothing" (a broken loss, mask, schedule or demo generator), no timing."""

import pytest
import torch

from platform.data.dataset import PreparedDataset as Dataset
from platform.sweeps.spaces import load_space
from platform.training.config import load_train_config
from platform.training.context import Context, seed_everything
from platform.training.hooks import LocalHooks
from platform.training.loop import fit

pytestmark = pytest.mark.slow  # about 200 updates

FLOOR = 10.0  # dev BLEU; the seeded run below reaches about 24 (a model that learns nothing: < 1)


def test_the_quickstart_sweep_setting_learns_the_demo_within_12_epochs(demo_dataset, tmp_path):
    # the session's demo dataset has 2,000 pairs: 17 updates of 1,500 tokens per epoch
    space = load_space("dbsa", "sweep", ["eval.max_sentences=100"], max_epochs=12)
    config = load_train_config(space.trial_config(space.first_points()[0]))
    assert config.model.p_enc == 1 and config.optim.lr == 2e-3  # the paper's layer 4/6 of 2, the space's first lr
    seed_everything(config.seed)
    torch.set_num_threads(2)
    history = fit(config, Dataset.open(demo_dataset), Context(), LocalHooks(tmp_path, config), log=lambda line: None)
    bleu = [round(epoch["dev_bleu"], 2) for epoch in history]
    assert history[-1]["step"] >= 200
    assert bleu[-1] >= FLOOR, f"dev BLEU by epoch {bleu}: the sweep setting no longer learns the demo corpus"
    assert bleu[-1] > bleu[0], bleu
