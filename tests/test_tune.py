"""Real sweeps: real local Ray cluster, real Optuna, real MLflow sqlite store."""

import re
import subprocess
import sys
import textwrap

import pytest
from mlflow.tracking import MlflowClient

from conftest import ROOT
from helpers import free_port, runs_of, sweep_args
from platform import tune

pytestmark = pytest.mark.slow


def test_smoke_sweep_makes_a_parent_and_child_runs_that_match_the_summary(ray_cluster, demo_dataset, tmp_path, capsys):
    assert tune.main(sweep_args(demo_dataset, tmp_path, "--name", "s1")) == 0
    table = capsys.readouterr().out
    client, runs = runs_of(f"sqlite:///{tmp_path}/mlflow.db", "sweep")
    parents = [r for r in runs if r.data.tags.get("sweep_parent") == "s1"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) >= 3 and {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    statuses = {c.data.tags["trial_id"]: (c.info.status, c.data.tags.get("error"), c.data.tags.get("pruned")) for c in children}
    assert all(status == "FINISHED" for status, _, _ in statuses.values()), statuses
    knobs = ["p_enc", "p_dec", "lambda_enc", "lambda_dec", "dropout", "optim.lr", "optim.warmup_steps"]
    sampled = {tuple(c.data.params[k] for k in knobs) for c in children}
    assert len(sampled) == len(children)  # distinct configurations
    for child in children:
        history = client.get_metric_history(child.info.run_id, "dev_bleu")
        assert len(history) >= 1 and child.data.tags["trial_id"] in table
        assert {a.path for a in client.list_artifacts(child.info.run_id)} >= {"config.yaml", "best", "plots"}
        best = max(m.value for m in history)
        row = next(line for line in table.splitlines() if line.startswith(f"| {child.data.tags['trial_id']} "))
        assert f"{best:.2f}" in [cell.strip() for cell in row.split("|")]  # summary = the store's best
        assert f"trial {child.data.tags['trial_id']} epoch 1/2  train_loss" in table  # the quiet console's lines
    assert "Reporting training result" not in table and "Configuration for experiment" not in table
    best_trial = parents[0].data.tags["best_trial"]
    # MLflow's runs table: Source, Dataset and Models filled on the parent's row too
    assert parents[0].data.tags["mlflow.source.name"] == "platform.tune" == children[0].data.tags["mlflow.source.name"]
    assert {i.dataset.digest for i in parents[0].inputs.dataset_inputs} == {
        i.dataset.digest for i in children[0].inputs.dataset_inputs} != set()
    best_child = next(c for c in children if c.data.tags["trial_id"] == best_trial)
    assert [o.model_id for o in parents[0].outputs.model_outputs] == [o.model_id for o in best_child.outputs.model_outputs]
    assert len(best_child.outputs.model_outputs) == 1
    # every trial that ran all its epochs has its end-of-run logging (Tune stops a trial at its
    # last result: that logging must come before it, or it is cut off)
    complete = [c for c in children if c.data.tags.get("pruned") != "true"]
    assert complete and all("tracking_wait_s" in c.data.metrics and len(c.outputs.model_outputs) == 1
                            for c in complete), [(c.data.tags["trial_id"], sorted(c.data.metrics)) for c in complete]
    assert f"best: trial {best_trial}" in table and "compare in MLflow: mlflow ui --backend-store-uri" in table
    assert (f"re-run the best config: python -m platform.train --model dbsa --config {tmp_path}/runs/s1/best_config.yaml"
            f" --data {demo_dataset} --experiment sweep --tracking-uri sqlite:///{tmp_path}/mlflow.db") in table
    assert (tmp_path / "runs" / "s1" / "sweep.png").exists() and (tmp_path / "runs" / "s1" / "console.log").exists()
    assert "training steps" in table and parents[0].data.metrics["time_share_steps"] > 0
    parent_files = {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    assert {"summary.md", "summary.csv", "best_config.yaml", "config.yaml", "plots", "optuna"} <= parent_files
    # the Optuna study, saved beside the sweep and on its parent run (optuna-dashboard opens it)
    import optuna

    study = optuna.load_study(study_name="s1", storage=f"sqlite:///{tmp_path}/runs/s1/optuna.db")
    assert len(study.trials) == len(children) and all(t.state.name in ("COMPLETE", "PRUNED") for t in study.trials)
    assert all(t.intermediate_values for t in study.trials)  # ASHA's rungs saw them: the dev BLEU per epoch
    optuna_files = {a.path for a in client.list_artifacts(parents[0].info.run_id, "optuna")}
    assert {"optuna/optuna.db", "optuna/intermediate_values.png", "optuna/optimization_history.png"} <= optuna_files
    # the best config re-runs with platform.train
    best_yaml = client.download_artifacts(parents[0].info.run_id, "best_config.yaml", str(tmp_path))
    from platform.training.config import resolve_config
    assert resolve_config("dbsa", "smoke", config_file=best_yaml).model.name == "dbsa"
    # and platform.report compares the runs
    from platform import report
    assert report.main(["--experiment", "sweep", "--out", str(tmp_path / "report"),
                        "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert all(c.info.run_name in text for c in children)
    assert (tmp_path / "report" / "report.csv").read_text().count("\n") == len(children) + 1
    assert (tmp_path / "report" / "sweep.png").exists()
    assert "report" in {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    # the name is this sweep's: reusing it without --resume is refused before any trial runs
    from platform.errors import UserError
    with pytest.raises(UserError, match="a sweep named 's1' exists .* add --resume"):
        tune.main(sweep_args(demo_dataset, tmp_path, "--name", "s1"))
    assert len(runs_of(f"sqlite:///{tmp_path}/mlflow.db", "sweep")[1]) == len(runs)
    # and every run records the driver's commit (a trial runs in Ray's copy, which has no .git)
    assert {c.data.params["git_commit"] for c in children} == {parents[0].data.params["git_commit"]} != {"unknown"}


TWO_NODES = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray
    from ray.cluster_utils import Cluster
    # its own dashboard port: the state API must not reach another cluster's
    cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 2, "dashboard_port": {port}}})
    cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, runtime_env={{"working_dir": {root!r}, "excludes": [".git", "data", "runs", "*.db"]}})
    from platform import tune
    code = tune.main(["--space", "dbsa", "--smoke", "--data", {data!r}, "--experiment", "two-nodes",
                      "--tracking-uri", "sqlite:///{tmp}/mlflow.db", "--storage-path", "{tmp}/runs",
                      "--num-samples", "4", "--cpus-per-worker", "1.5"])
    ray.shutdown()
    cluster.shutdown()
    sys.exit(code)
""")


def test_a_sweep_uses_both_nodes_of_a_two_node_cluster(own_cluster, demo_dataset, tmp_path):
    script = tmp_path / "two_nodes.py"
    script.write_text(TWO_NODES.format(root=str(ROOT), data=str(demo_dataset), tmp=str(tmp_path), port=free_port()))
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    _, runs = runs_of(f"sqlite:///{tmp_path}/mlflow.db", "two-nodes")
    nodes = {r.data.tags["node_id"] for r in runs if "node_id" in r.data.tags}
    assert len(nodes) == 2  # each node fits one 1.5-CPU trainer worker: trials ran on both


def test_a_sweep_in_which_every_trial_failed_exits_non_zero_without_a_best_config(ray_cluster, demo_dataset, tmp_path,
                                                                                   capsys):
    import shutil

    from platform.errors import UserError

    broken = tmp_path / "broken"
    shutil.copytree(demo_dataset, broken)
    (broken / "train.parquet").write_bytes(b"not parquet")  # meta and splits exist: every trial's workers fail
    with pytest.raises(UserError, match=r"^no trial of the sweep finished; the first failed with: .+") as failed:
        tune.main(sweep_args(broken, tmp_path, "--name", "all-fail", "--num-samples", "2"))
    assert "\n" not in str(failed.value)
    out = capsys.readouterr().out
    failed_lines = re.findall(r"^\[ *\d+:\d\d\] trial (\w+) FAILED: (.+)$", out, re.M)
    assert len({trial for trial, _ in failed_lines}) == 2 and all(why.strip() for _, why in failed_lines), out
    assert "best:" not in out and "re-run the best config" not in out
    assert not (tmp_path / "runs" / "all-fail" / "best_config.yaml").exists()
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    parent = client.search_runs([client.get_experiment_by_name("sweep").experiment_id], "tags.sweep_parent = 'all-fail'")[0]
    assert parent.info.status == "FAILED" and "best_config.yaml" not in {a.path for a in client.list_artifacts(parent.info.run_id)}
