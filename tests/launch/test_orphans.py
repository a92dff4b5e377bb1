"""Placement groups an ended sweep left behind (``launch.cluster.release_orphaned_groups``):
which ones count as left behind, and the real state-API records they are read from."""

from __future__ import annotations

from helpers import wait_for

from platform.launch.cluster import cluster_records, orphaned_groups, placement_group_ids, release_orphaned_groups


def group(group_id: str, job: str, state: str = "CREATED", detached: bool = False) -> dict:
    return {"placement_group_id": group_id, "creator_job_id": job, "state": state, "is_detached": detached,
            "bundles": [{"unit_resources": {"CPU": 1.0}}]}


def test_only_an_ended_sweeps_unused_non_detached_groups_are_left_behind():
    groups = [group("left", "03"), group("removed", "03", state="REMOVED"), group("detached", "03", detached=True),
              group("in-use", "03"), group("running-job", "01"), group("other-program", "05")]
    ended_sweeps = {"03"}  # job 05 ended too, but it was not a platform.tune driver
    assert [g["placement_group_id"] for g in orphaned_groups(groups, ended_sweeps, in_use={"in-use"})] == ["left"]
    # the running sweep (job 01) after its experiment: the groups it made since it began (what is
    # still placed in them is being torn down)
    groups += [group("stopped-mid-start", "01"), group("still-placed", "01")]
    this_sweep = ("01", {"running-job"})  # running-job's group was there before the experiment
    assert [g["placement_group_id"] for g in orphaned_groups(groups, ended_sweeps, {"in-use", "still-placed"},
                                                             this_sweep)] == ["left", "stopped-mid-start",
                                                                              "still-placed"]


def test_the_records_come_from_the_real_state_api_and_a_running_jobs_group_is_kept(ray_cluster):
    from ray.util.placement_group import placement_group, remove_placement_group

    ray = ray_cluster
    mine = placement_group([{"CPU": 1.0}])
    try:
        ray.get(mine.ready(), timeout=30)
        ended, in_use, groups = cluster_records()
        job = ray.get_runtime_context().get_job_id()
        records = {g["placement_group_id"]: g for g in groups}
        assert records[mine.id.hex()]["creator_job_id"] == job and job not in ended  # this test's own job runs
        assert release_orphaned_groups(log=lambda line: None) == 0.0  # a running job's group is no orphan
        assert mine.id.hex() in {g["placement_group_id"] for g in cluster_records()[2]}  # still there
    finally:
        remove_placement_group(mine)
    wait_for(lambda: mine.id.hex() not in {g["placement_group_id"] for g in cluster_records()[2]}, 30, "its removal")


def test_a_group_the_running_sweep_made_during_its_experiment_is_released_when_the_experiment_ends(ray_cluster):
    """What a Train controller stopped while starting its worker group leaves (Ray's cleaner
    never learnt of the group): made by this job during the experiment, no actor in it."""
    from ray.util.placement_group import placement_group, remove_placement_group

    ray = ray_cluster
    earlier = placement_group([{"CPU": 0.5}])  # there before the experiment: not the experiment's
    ray.get(earlier.ready(), timeout=30)
    try:
        before = placement_group_ids()
        assert before is not None and earlier.id.hex() in before
        left = placement_group([{"CPU": 0.5}])
        ray.get(left.ready(), timeout=30)
        said = []
        assert release_orphaned_groups(log=said.append, before=before) == 0.5
        assert said == ["cluster: released 0.5 CPUs that ended trials' placement groups still held"]
        wait_for(lambda: left.id.hex() not in placement_group_ids(), 30, "its removal")
        assert earlier.id.hex() in placement_group_ids()
    finally:
        remove_placement_group(earlier)
