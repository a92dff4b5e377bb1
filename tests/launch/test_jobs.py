"""A sweep submitted as a Ray job (docs/cluster.md: ``ray job submit`` through the forwarded
dashboard port), on the session's local cluster through Ray's Jobs API: the sweep runs in the
cluster, not in the submitting process, and its logs and status come back through the API."""

from __future__ import annotations

import time

import pytest

from conftest import ROOT
from helpers import runs_of

pytestmark = pytest.mark.slow


def test_a_sweep_submitted_as_a_ray_job_runs_in_the_cluster_and_reports_through_the_jobs_api(ray_cluster, demo_dataset,
                                                                                             tmp_path):
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient()  # the local cluster's dashboard, found as `ray job submit` finds it
    entrypoint = (f"python -m platform.tune --space dbsa --smoke --data {demo_dataset} --experiment jobs "
                  f"--tracking-uri sqlite:///{tmp_path}/mlflow.db --storage-path {tmp_path}/runs --name j1 "
                  f"--num-trials 1 --address auto --set max_steps_per_epoch=3 --set eval.max_sentences=8")
    job_id = client.submit_job(entrypoint=entrypoint, runtime_env={
        "working_dir": str(ROOT), "excludes": [".git", "data", "runs", "*.db", ".ci-venv"],
        "env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}})
    deadline = time.time() + 600
    while client.get_job_status(job_id) not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
        assert time.time() < deadline, client.get_job_logs(job_id)[-3000:]
        time.sleep(2)
    logs = client.get_job_logs(job_id)  # what `ray job logs` shows
    assert client.get_job_status(job_id) == JobStatus.SUCCEEDED, logs[-3000:]
    assert "sweep j1: 1 trials of dbsa" in logs and "best: trial " in logs
    _, runs = runs_of(f"sqlite:///{tmp_path}/mlflow.db", "jobs")
    parent = next(r for r in runs if r.data.tags.get("sweep_parent") == "j1")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.status == "FINISHED" and len(children) == 1
    assert all(c.info.status == "FINISHED" for c in children)
