"""How many trials a sweep runs at once, read off a real (local, 4-CPU, GPU-less) Ray cluster."""

import pytest

from platform.errors import UserError
from platform.launch.cluster import max_concurrent_trials


def test_a_local_cluster_runs_what_fits_and_refuses_what_never_can(ray_cluster):
    assert max_concurrent_trials(1, 1.0, 0.0) == 3  # 4 CPUs: (1 worker CPU + a driver's 0.1) × 3
    assert max_concurrent_trials(1, 1.0, 0.0, requested=10) == 3
    assert max_concurrent_trials(1, 1.0, 0.0, requested=1) == 1
    with pytest.raises(UserError, match=r"^the cluster \(4 CPUs, 0 GPUs\) cannot fit one trial of 1 workers"):
        max_concurrent_trials(1, 1.0, 1.0)


def test_a_joined_cluster_waits_for_its_autoscaler_instead_of_refusing(ray_cluster):
    """A ray up head before its first GPU worker: nothing fits yet, and that is no error."""
    said = []
    assert max_concurrent_trials(1, 1.0, 1.0, requested=3, joined=True, log=said.append) == 3
    assert said == ["cluster: 4 CPUs, 0 GPUs up now, 0 trial(s) fit; the others wait for Ray's autoscaler to add nodes"]
    assert max_concurrent_trials(1, 1.0, 1.0, joined=True, log=said.append) == 1
    assert max_concurrent_trials(1, 1.0, 0.0, requested=1, joined=True, log=said.append) == 1  # fits now: no line
    assert len(said) == 2


def test_gpus_per_worker_defaults_to_none_without_gpus_and_packs_small_trials_onto_one(ray_cluster):
    from platform.launch.cluster import SMALL_MODEL_GPU_SHARE, auto_gpus_per_worker, cluster_gpus

    assert cluster_gpus(joined=False) == 0.0  # the session's cluster has no GPU: trials train on CPUs
    assert auto_gpus_per_worker(cluster_gpus(joined=False), "sweep") == 0.0
    assert auto_gpus_per_worker(4.0, "sweep") == auto_gpus_per_worker(1.0, "cpu") == SMALL_MODEL_GPU_SHARE == 1 / 8
    assert auto_gpus_per_worker(1.0, "paper") == 1.0
