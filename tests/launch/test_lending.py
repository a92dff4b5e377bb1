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
    """The lender's name and handle, and the session cluster's CPUs once they are all free."""
    name = "nmt-core-lender-test"
    total = idle_total(ray_cluster)
    handle = lending.start_lender(name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # what a 1-CPU Train worker starts with
    yield name, handle, total
    torch.set_num_threads(threads)
    lending.stop_lender(handle, name)  # every loan back, even after a failed assertion


def free_cpus(ray) -> float:
    return ray.available_resources().get("CPU", 0.0)


def live_groups() -> list[dict]:
    from ray.util import placement_group_table

    return [g for g in placement_group_table().values() if g["state"] != "REMOVED"]


def step_until(borrower, condition, what: str):
    """Steps (``before_step``) until ``condition()``: the borrower reads the lender's answers
    at a later step than it asks, as in training."""
    return wait_for(lambda: condition(borrower.before_step()), 30, what, poll=0.05)


def idle_total(ray) -> float:
    """The session cluster's CPUs, once they are all free (nothing left from an earlier test)."""
    total = ray.cluster_resources()["CPU"]
    wait_for(lambda: free_cpus(ray) == total, 60, "an idle session cluster")
    return total


def borrowing_one_cpu(ray, name, handle, offers, running):
    """A worker of trial ``t1`` (1 CPU) that borrowed the one CPU ``offers`` lend it."""
    borrower = lending.CoreBorrower(name, "t1", "0", cpus_per_worker=1.0, check_every_s=0.0, cores=2)
    assert borrower.before_step() == 0.0 and torch.get_num_threads() == 1  # nothing offered yet
    ray.get(handle.offer.remote(offers, running))
    step_until(borrower, lambda share: share == 1.0, "the loan")  # one slot's worth: its step time counts double
    assert torch.get_num_threads() == 2
    return borrower


def test_a_borrower_takes_what_it_is_offered_on_its_node_and_gives_it_back(ray_cluster, lender):
    ray, (name, handle, total) = ray_cluster, lender
    borrower = borrowing_one_cpu(ray, name, handle, {"t1": 1.0, "other": 1.0}, ["t1", "other"])
    wait_for(lambda: free_cpus(ray) == total - 1, 30, "the lent CPU reserved in Ray's books")
    assert len(live_groups()) == 1

    ray.get(handle.offer.remote({"other": 1.0}, ["t1", "other"]))  # withdrawn: e.g. a retried trial is pending again
    step_until(borrower, lambda share: share == 0.0, "the loan given back")
    assert torch.get_num_threads() == 1
    wait_for(lambda: free_cpus(ray) == total, 30, "the lent CPU back")
    assert live_groups() == []


def test_a_trials_loans_come_back_when_it_stops_running_however_its_workers_ended(ray_cluster, lender):
    ray, (name, handle, total) = ray_cluster, lender
    borrowing_one_cpu(ray, name, handle, {"t1": 1.0}, ["t1"])
    wait_for(lambda: free_cpus(ray) == total - 1, 30, "the lent CPU reserved")
    # the worker is killed (ASHA stopped the trial): it never returns the loan; the driver sees the trial end
    ray.get(handle.offer.remote({}, []))
    wait_for(lambda: free_cpus(ray) == total, 30, "the dead worker's loan back")
    assert live_groups() == []


def test_an_offer_its_node_cannot_place_is_declined_without_a_leftover_request(ray_cluster, lender):
    ray, (name, handle, total) = ray_cluster, lender
    ray.get(handle.offer.remote({"t1": total + 2}, ["t1"]))
    borrower = lending.CoreBorrower(name, "t1", "0", cpus_per_worker=1.0, check_every_s=0.0, cores=int(total) + 8)
    step_until(borrower, lambda share: borrower.refused is not None, "the refusal")
    assert borrower.before_step() == 0.0 and torch.get_num_threads() == 1
    assert live_groups() == []
    # and it does not ask again for the same offer at once (that would stall every step by the wait)
    for _ in range(20):
        borrower.before_step()
    assert borrower.refused is not None and borrower.extra == 0


def test_a_borrower_without_a_lender_trains_on_without_one(ray_cluster):
    borrower = lending.CoreBorrower("nmt-core-lender-nobody", "t1", "0", cpus_per_worker=1.0, check_every_s=0.0)
    assert borrower.before_step() == 0.0 and borrower.before_step() == 0.0  # no exception: training goes on


class Trial:  # what the callback reads of a Tune trial
    def __init__(self, trial_id: str, status: str):
        self.trial_id, self.status = trial_id, status


def test_a_resumed_sweep_that_does_not_lend_runs_its_saved_lending_callback_harmlessly(ray_cluster, capsys):
    import ray.cloudpickle as cloudpickle

    callback = lending.lending_callback("nmt-core-lender-absent", num_samples=2, max_concurrent=2, cpus_per_worker=1.0)
    restored = cloudpickle.loads(cloudpickle.dumps(callback))  # as Tune saves and restores its callbacks
    restored.on_step_end(iteration=1, trials=[Trial("a", "RUNNING"), Trial("b", "TERMINATED")])
    restored.on_step_end(iteration=2, trials=[Trial("a", "RUNNING"), Trial("b", "TERMINATED")])
    assert restored.off and "idle CPUs are not lent in this sweep" in capsys.readouterr().err


LEND_SPACE = """\
# two trials at once: a short one (4 updates an epoch), and a long one (small batches: ~430
# updates an epoch) that borrows the short one's CPU once it is done; dev_loss, so ASHA keeps
# the long one (it has trained more)
model: transformer
metric: dev_loss
mode: min
params:
  max_steps_per_epoch: {type: categorical, choices: [4, 100000]}
  batching.max_tokens: {type: categorical, choices: [1024, 64]}
first_points:
  - {max_steps_per_epoch: 4, batching.max_tokens: 1024}
  - {max_steps_per_epoch: 100000, batching.max_tokens: 64}
"""


def test_a_sweeps_last_running_trial_trains_on_the_cpu_its_finished_neighbour_left(ray_cluster, demo_dataset,
                                                                                   tmp_path, capsys):
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
    long_run, short_run = by_steps[100000], by_steps[4]
    lent = sum(m.value for m in client.get_metric_history(long_run.info.run_id, "lent_steps_s"))
    assert lent > 1.0, lent  # its updates ran on 2 threads once the short trial was done
    assert client.get_metric_history(short_run.info.run_id, "lent_steps_s") == []  # it never ran alone
    assert "on idle slots' CPUs lent to a running trial" in out
    total = ray_cluster.cluster_resources()["CPU"]
    wait_for(lambda: free_cpus(ray_cluster) == total, 60, "every CPU back, the loan included")
    assert live_groups() == []
