"""training.retention: what a run keeps of its reported checkpoints is decided in one place,
from the run's config (the windows' file rules themselves: tests/training/test_averaging.py)."""

import torch

from platform.data.storage import locate
from platform.training.config import resolve_config
from platform.training.retention import BEST, BEST_CHECKPOINT, LAST, Retention, resume_kept


def reported(step: int, best_step: int) -> dict:
    return {"progress": {"step": step, "best_step": best_step}, "model": {"w": torch.full((2,), float(step))}}


def test_each_reported_checkpoint_is_kept_as_the_config_says_and_a_resume_forgets_what_came_after(tmp_path):
    config = resolve_config("transformer", "smoke", values={"average_last": 2, "keep_best": 1, "resume_checkpoints": 3})
    assert config.best_metric == "dev_bleu" and resume_kept(config) == 3  # Ray's num_to_keep, from here
    kept = tmp_path / "kept"
    retention = Retention(locate(kept), config)
    best_step = 0
    for step, bleu, validated in [(10, 1.0, True), (20, 3.0, True), (25, None, False), (30, 2.0, True)]:
        best = validated and bleu > 2.5 or step == 10
        best_step = step if best else best_step
        whole = tmp_path / f"whole_{step}.pt"
        whole.write_bytes(f"checkpoint at {step}".encode())
        retention.checkpoint(reported(step, best_step), {"dev_bleu": bleu} if validated else {}, validated,
                             whole if best else None)
        retention.registered(reported(step, best_step))
    names = lambda kind: sorted(p.name for p in (kept / kind).iterdir())  # noqa: E731
    assert names(LAST) == ["update_00000025.pt", "update_00000030.pt"]  # the last 2, validated or not
    assert names(BEST) == ["update_00000020_score_3.pt"]  # the best 1 of the validated
    # the best whole checkpoint: 10's went once a report after 20's was registered
    assert names(BEST_CHECKPOINT) == ["update_00000020.pt"]
    assert retention.best_checkpoint().read_bytes() == b"checkpoint at 20"
    retention.resumed(25)  # a restart from update 25: 30 is trained (and kept) again
    assert names(LAST) == ["update_00000025.pt"]
    weights = torch.load(kept / LAST / "update_00000025.pt", weights_only=True)
    assert weights["update"] == 25 and torch.equal(weights["model"]["w"], torch.full((2,), 25.0))
