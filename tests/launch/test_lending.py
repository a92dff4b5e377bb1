"""An idle trial slot's CPUs lent to the trials still running (``launch.lending``): the offers,
a Train worker's reservation on the real session cluster, and a real sweep whose long trial
borrows the CPUs its short one left."""

from __future__ import annotations

import pytest
import torch
from mlflow.tracking import MlflowClient

from conftest import wait_for
from platform import tune
from platform.launch import lending


def test_nothing_is_offered_while_a_trial_may_still_start():
    assert lending.offers({"a": "RUNNING"}, num_samples=3, max_concurrent=2, cpus_per_worker=1.0) == {}  # one not made yet
    assert lending.offers({"a": "RUNNING", "b": "PENDING"}, 2, 2, 1.0) == {}
    assert lending.offers({"a": "RUNNING", "b": "PAUSED"}, 2, 2, 1.0) == {}
    assert lending.offers({"a": "RUNNING", "b": "RUNNING"}, 2, 2, 1.0) == {}  # no slot is empty
    assert lending.offers({"a": "TERMINATED", "b": "ERROR"}, 2, 2, 1.0) == {}  # nothing runs


def test_empty_slots_are_shared_out_among_the_running_trials():
    done = {"x": "TERMINATED", "y": "TERMINATED"}
    assert lending.offers({**done, "a": "RUNNING"}, 3, 2, 1.0) == {"a": 1.0}
    assert lending.offers({**done, "a": "RUNNING"}, 3, 4, 2.0) == {"a": 6.0}  # 3 empty slots of 2 CPUs per worker
    assert lending.offers({**done, "b": "RUNNING", "a": "RUNNING"}, 4, 5, 1.0) == {"a": 2.0, "b": 1.0}


@pytest.fixture
def lender(ray_cluster):
    name = "nmt-core-lender-test"
    handle = lending.start_lender(name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # what a 1-CPU Train worker starts with
    yield name, handle
    torch.set_num_threads(threads)
    ray_cluster.kill(handle)


def free_cpus(ray) -> float:
    return ray.available_resources().get("CPU", 0.0)


def test_a_borrower_reserves_what_it_is_offered_on_its_node_and_gives_it_back(ray_cluster, lender):
    ray = ray_cluster
    name, handle = lender
    borrower = lending.CoreBorrower(name, "t1", base_threads=1, check_every_s=0.0, cores=2)
    total = ray.cluster_resources()["CPU"]
    wait_for(lambda: free_cpus(ray) == total, 60, "an idle session cluster")
    assert borrower.before_step() == 0.0 and torch.get_num_threads() == 1  # nothing offered yet

    ray.get(handle.offer.remote({"t1": 1.0, "other": 1.0}))
    assert borrower.before_step() == 1.0  # one slot's worth: its step time counts double
    assert torch.get_num_threads() == 2
    wait_for(lambda: free_cpus(ray) == total - 1, 30, "the lent CPU reserved in Ray's books")

    ray.get(handle.offer.remote({"other": 1.0}))  # withdrawn: e.g. a retried trial is pending again
    assert borrower.before_step() == 0.0 and torch.get_num_threads() == 1
    wait_for(lambda: free_cpus(ray) == total, 30, "the lent CPU back")


def test_an_offer_its_node_cannot_place_is_declined_without_a_leftover_request(ray_cluster, lender):
    from ray.util import placement_group_table

    ray = ray_cluster
    name, handle = lender
    total = ray.cluster_resources()["CPU"]
    wait_for(lambda: free_cpus(ray) == total, 60, "an idle session cluster")
    ray.get(handle.offer.remote({"t1": total + 2}))
    borrower = lending.CoreBorrower(name, "t1", base_threads=1, check_every_s=0.0, cores=int(total) + 8)
    assert borrower.before_step() == 0.0 and torch.get_num_threads() == 1
    assert [g for g in placement_group_table().values() if g["state"] not in ("REMOVED",)] == []
    assert borrower.refused is not None  # and it does not ask again for the same offer at once
    assert borrower.before_step() == 0.0 and borrower.group is None


LEND_SPACE = """\
# two trials at once: a short one, and a long one that borrows its CPU once it is done
model: transformer
metric: dev_bleu
mode: max
params:
  max_steps_per_epoch: {type: categorical, choices: [4, 1200]}
first_points:
  - {max_steps_per_epoch: 4}
  - {max_steps_per_epoch: 1200}
"""


def test_a_sweeps_last_running_trial_trains_on_the_cpu_its_finished_neighbour_left(ray_cluster, demo_dataset,
                                                                                   tmp_path, capsys):
    from ray.util import placement_group_table

    space = tmp_path / "lend.yaml"
    space.write_text(LEND_SPACE)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert tune.main(["--space", str(space), "--smoke", "--data", str(demo_dataset), "--experiment", "lend",
                      "--tracking-uri", uri, "--storage-path", str(tmp_path / "runs"), "--name", "lend",
                      "--num-samples", "2", "--max-concurrent", "2", "--set", "eval.max_sentences=8"]) == 0
    out = capsys.readouterr().out
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("lend")
    children = [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("mlflow.parentRunId")]
    by_steps = {int(r.data.params["max_steps_per_epoch"]): r for r in children}
    long_run, short_run = by_steps[1200], by_steps[4]
    lent = sum(m.value for m in client.get_metric_history(long_run.info.run_id, "lent_steps_s"))
    assert lent > 1.0, lent  # its updates ran on 2 threads once the short trial was done
    assert client.get_metric_history(short_run.info.run_id, "lent_steps_s") == []  # it never ran alone
    assert "on idle slots' CPUs lent to a running trial" in out
    total = ray_cluster.cluster_resources()["CPU"]
    wait_for(lambda: free_cpus(ray_cluster) == total, 60, "every CPU back, the loan included")
    assert [g for g in placement_group_table().values() if g["state"] != "REMOVED"] == []
