"""Real sweeps: real local Ray cluster, real Optuna, real MLflow sqlite store."""

import re
import statistics
import threading
import time
from pathlib import Path

import pytest
from helpers import assert_the_cluster_is_free, runs_of, sweep_args, validated_epochs, wait_for

from platform import tune

pytestmark = pytest.mark.slow


def test_smoke_sweep_makes_a_parent_and_child_runs_that_match_the_summary(ray_cluster, demo_dataset, tmp_path, capsys):
    # two trials: one wave on the session's cluster (the smoke default, 3, is two)
    assert tune.main(sweep_args(demo_dataset, tmp_path, "--name", "s1", "--num-trials", "2", "--register-model",
                                "nmt-sweep")) == 0
    table = capsys.readouterr().out
    client, runs = runs_of(f"sqlite:///{tmp_path}/mlflow.db", "sweep")
    parents = [r for r in runs if r.data.tags.get("sweep_parent") == "s1"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 2 and {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    statuses = {c.data.tags["trial_id"]: (c.info.status, c.data.tags.get("error"), c.data.tags.get("pruned"))
                for c in children}
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
    assert ([o.model_id for o in parents[0].outputs.model_outputs]
            == [o.model_id for o in best_child.outputs.model_outputs])
    assert len(best_child.outputs.model_outputs) == 1
    version = client.get_model_version_by_alias("nmt-sweep", "champion")  # --register-model: the best trial's
    assert version.run_id == best_child.info.run_id and version.tags["sweep"] == "s1"
    assert "registered model 'nmt-sweep' version 1" in table
    # every trial that ran all its epochs has its end-of-run logging (Tune stops a trial at its
    # last result: that logging must come before it, or it is cut off)
    complete = [c for c in children if c.data.tags.get("pruned") != "true"]
    assert complete and all("tracking_wait_s" in c.data.metrics and len(c.outputs.model_outputs) == 1
                            for c in complete), [(c.data.tags["trial_id"], sorted(c.data.metrics)) for c in complete]
    assert f"best: trial {best_trial}" in table and "compare in MLflow: mlflow ui --backend-store-uri" in table
    assert (f"re-run the best config: python -m platform.train --model dbsa --config "
            f"{tmp_path}/runs/s1/best_config.yaml --data {demo_dataset} --experiment sweep "
            f"--tracking-uri sqlite:///{tmp_path}/mlflow.db") in table
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
    extend_then_warm_start(demo_dataset, tmp_path, capsys, parents[0], children)


def extend_then_warm_start(demo_dataset, tmp_path, capsys, parent, children):
    """The finished sweep s1 extended by a trial: the same study and parent run, the searcher
    and ASHA's rungs as the first experiment left them; then a new sweep warm-started from it."""
    import optuna
    from helpers import rungs, saved_state

    uri, first = f"sqlite:///{tmp_path}/mlflow.db", {c.data.tags["trial_id"] for c in children}
    capsys.readouterr()
    assert tune.main(sweep_args(demo_dataset, tmp_path, "--extend", "s1", "--num-trials", "1")) == 0
    out = capsys.readouterr().out
    client, runs = runs_of(uri, "sweep")
    (again,) = [r for r in runs if r.data.tags.get("sweep_parent") == "s1"]
    assert again.info.run_id == parent.info.run_id and again.info.status == "FINISHED"
    assert again.data.tags["extensions"] == "1"
    grown = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    added = {r.data.tags["trial_id"] for r in grown} - first
    assert len(grown) == len(children) + 1 and len(added) == 1
    study = optuna.load_study(study_name="s1", storage=f"sqlite:///{tmp_path}/runs/s1/optuna.db")
    assert [t.number for t in study.trials] == list(range(len(children) + 1))  # the same study, numbered on
    new_params = [t.params for t in study.trials[len(children):]]
    assert all(p not in [t.params for t in study.trials[:len(children)]] for p in new_params)
    # the extension's searcher was the first experiment's: it knows all three trials, and the
    # scheduler's first rung holds the first experiment's trials beside the new ones
    saved_study, scheduler = saved_state(str(tmp_path / "runs" / "s1-extend-1"))
    assert len(saved_study.trials) == len(children) + 1
    assert first <= rungs(scheduler)[1] and rungs(scheduler)[1] & added
    summary = client.download_artifacts(parent.info.run_id, "summary.csv", str(tmp_path / "extended"))
    assert Path(summary).read_text().count("\n") == len(children) + 1 + 1  # every trial of both experiments
    assert "best: trial" in out
    # a new sweep that starts from s1's finished trials (the same space: all of them carried)
    assert tune.main(sweep_args(demo_dataset, tmp_path, "--name", "w1", "--warm-start-from", "s1",
                                "--num-trials", "1", "--max-epochs", "1")) == 0
    out = capsys.readouterr().out
    assert f"warm start: carried {len(children) + 1} of the {len(children) + 1} finished trials of sweep s1" in out
    warm = optuna.load_study(study_name="w1", storage=f"sqlite:///{tmp_path}/runs/w1/optuna.db")
    carried = [t for t in warm.trials if t.user_attrs.get("warm_start_from") == "s1"]
    assert len(carried) == len(children) + 1 and len(warm.trials) == len(carried) + 1
    assert sorted(t.user_attrs["warm_start_trial"] for t in carried) == list(range(len(children) + 1))
    assert [t.values for t in carried] == [t.values for t in study.trials]
    workers_cannot_write_what_resume_unpickles(tmp_path / "runs")


TUNE_STATE = ("experiment_state-", "search_gen_state-", "basic-variant-state-", "searcher-state-")


def workers_cannot_write_what_resume_unpickles(runs: Path) -> None:
    """Every file three real sweeps wrote, as keys under the cluster's storage: what ``--resume``
    and ``--extend`` unpickle (Tune's state: pickles, and JSON with pickled fallbacks) is denied
    to the worker role; what Train workers write (checkpoints, kept weights) is allowed."""
    from helpers import worker_may_write

    files = [path.relative_to(runs).as_posix() for path in runs.rglob("*") if path.is_file()]
    unpickled = [f for f in files if f.endswith(".pkl") or Path(f).name.startswith(TUNE_STATE)]
    written_by_workers = [f for f in files if "/checkpoint_" in f or "/kept/" in f]
    assert unpickled and written_by_workers, files
    assert not [f for f in unpickled if worker_may_write(f"syntax-nmt/ray/{f}")]
    assert all(worker_may_write(f"syntax-nmt/ray/{f}") for f in written_by_workers)



class StudyWatcher:
    """Reads the sweep's Optuna storage from another thread while the sweep runs (what
    ``optuna-dashboard`` does), through Optuna's public API only."""

    def __init__(self, path, name: str):
        import threading

        self.path, self.name, self.seen, self.done = path, name, [], threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        import optuna

        while not self.done.wait(0.5):
            if not self.path.is_file():
                continue
            try:
                study = optuna.load_study(study_name=self.name, storage=f"sqlite:///{self.path}")
            except Exception:  # noqa: BLE001 - not created yet (KeyError), or the file is being set up
                continue
            self.seen.append([t.state.name for t in study.trials])

    def stop(self) -> list[list[str]]:
        self.done.set()
        self.thread.join(timeout=30)
        return self.seen


def test_a_papers_sweep_through_a_tracking_outage_confirms_its_best_config_on_test_against_the_baseline(
        ray_cluster, demo_dataset, tmp_path, capsys, request):
    """--search random --scheduler none --confirm 1 on the papers space: trials of several
    recipes with their own knobs, two at a time, the live study read while the sweep runs, then
    the best config and the baseline retrained with 2 seeds each, scored on test, and compared.
    Through a real MLflow server that is SIGKILLed once a trial has logged epoch 1 and started
    again 5 s later, its relay actor killed meanwhile (Ray starts it again): trials and the
    confirmation open, log and close their runs around the outage, the driver closes the
    others' (kept in the spool while the server is down), every run and metric is in the store
    afterwards, and the sweep leaves no actor or placement group holding the cluster."""
    from servers import MlflowOutage

    from platform.tracking.relay import relay_name

    (tmp_path / "mlflow").mkdir()
    outage = MlflowOutage(tmp_path / "mlflow", seconds=5).__enter__()
    request.addfinalizer(lambda: outage.__exit__(None, None, None))  # the server stopped with the test
    uri = outage.uri
    args = sweep_args(demo_dataset, tmp_path, "--name", "p1", "--num-trials", "2", "--search", "random",
                      "--scheduler", "none", "--confirm", "1", "--confirm-seeds", "2", "--max-concurrent", "2",
                      "--set", "max_steps_per_epoch=3", "--set", "eval.max_sentences=8",
                      "--register-model", "nmt-papers", experiment=outage.EXPERIMENT, space="papers")
    args[args.index("--tracking-uri") + 1] = uri
    killed = []

    def kill_the_relay_during_the_outage():  # Ray starts it again (max_restarts)
        import ray

        wait_for(lambda: outage.times, 400, "the server down")
        ray.kill(ray.get_actor(relay_name(uri)), no_restart=False)
        killed.append(time.time())

    killer = threading.Thread(target=kill_the_relay_during_the_outage, daemon=True)
    killer.start()
    watcher = StudyWatcher(tmp_path / "runs" / "p1" / "optuna.db", "p1")
    try:
        assert tune.main(args) == 0  # the outage does not stop the sweep
    finally:
        seen = watcher.stop()
    ended = time.time()
    killer.join(timeout=60)
    assert not outage.failures and len(outage.times) == 2 and outage.times[1] < ended  # during the sweep
    assert killed and killed[0] < ended
    assert_the_cluster_is_free()
    client, runs = runs_of(uri, outage.EXPERIMENT)
    out = capsys.readouterr().out
    # the study held its trials while the sweep ran (a trial still RUNNING), and every one at the end
    assert any("RUNNING" in states for states in seen), seen[-5:]
    import optuna

    study = optuna.load_study(study_name="p1", storage=f"sqlite:///{tmp_path}/runs/p1/optuna.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 2  # no scheduler: every trial ran to its end
    parent = next(r for r in runs if r.data.tags.get("sweep_parent") == "p1")
    assert parent.info.status == "FINISHED" and "summary.md" in {a.path for a in client.list_artifacts(
        parent.info.run_id)}
    assert parent.data.params["searcher"] == "optuna-random" and parent.data.params["scheduler"] == "none"
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") and r.data.tags.get("stage") != "confirm"]
    confirms = [r for r in runs if r.data.tags.get("stage") == "confirm"]
    assert all(r.info.status == "FINISHED" and validated_epochs(client, r.info.run_id) == [1, 2] for r in trials), \
        [(r.info.run_name, r.info.status) for r in trials]  # every epoch in the store, once
    # the papers space: the first points are DBSA (deguchi2019/enc+dec) and dep+rel, each with its own knobs
    recipes = {r.data.tags["recipe"]: r for r in trials}
    assert {"deguchi2019/enc+dec", "omote2019/dep+rel"} <= set(recipes)
    assert recipes["deguchi2019/enc+dec"].data.params["model"] == "dbsa"
    assert recipes["deguchi2019/enc+dec"].data.params["lambda_enc"] == "1.0"
    dep_rel = recipes["omote2019/dep+rel"].data.params
    assert dep_rel["model"] == "deprel" and dep_rel["k_clip"] == "2"
    # the summary's knob columns stay blank where a trial's recipe has no such knob
    import csv

    summary = client.download_artifacts(parent.info.run_id, "summary.csv", str(tmp_path))
    rows = list(csv.DictReader(open(summary, encoding="utf-8")))
    assert len(rows) == 2 and {"deguchi2019/enc+dec", "omote2019/dep+rel"} == {row["recipe"] for row in rows}
    for row in rows:
        assert (row["lambda_enc"] != "") == (row["recipe"] == "deguchi2019/enc+dec"), row
        assert (row["k_clip"] != "") == (row["recipe"] == "omote2019/dep+rel"), row
    # confirmation: the baseline and the best config, 2 seeds each, nested under the sweep, scored on test
    assert len(confirms) == 4 and {r.data.tags["mlflow.parentRunId"] for r in confirms} == {parent.info.run_id}
    offered = {"test_bleu", "test_chrf", "test_chrfpp", "test_ter"}  # every sacreBLEU metric the platform offers
    assert all(r.info.status == "FINISHED" and offered <= set(r.data.metrics) for r in confirms)
    by_config = {}
    for r in confirms:
        by_config.setdefault(r.data.tags["confirm_of"], set()).add(r.data.params["seed"])
    assert by_config["baseline deguchi2019/baseline"] == {"1", "2"} and len(by_config) == 2
    assert all(seeds == {"1", "2"} for seeds in by_config.values())
    assert all(client.list_artifacts(r.info.run_id, "test") for r in confirms)  # the hypotheses, kept
    table = client.download_artifacts(parent.info.run_id, "confirmation.md", str(tmp_path))
    text = open(table, encoding="utf-8").read()
    assert "| baseline deguchi2019/baseline | deguchi2019/baseline |" in text
    best = next(c for c in by_config if c.startswith("trial "))
    row = next(line for line in text.splitlines() if line.startswith(f"| {best} |"))
    assert re.search(r"\| \d+\.\d\d ± \d+\.\d\d \|", row) and re.search(r"\| 0\.\d{4} \|", row)  # mean ± std, p
    means = [r.data.metrics["test_bleu"] for r in confirms if r.data.tags["confirm_of"] == best]
    assert f"{sum(means) / len(means):.2f} ±" in row
    # the primary test is over seeds (Welch, Holm over the table), the paired ones secondary
    from platform.tracking.significance import seed_test

    baseline_bleu = [r.data.metrics["test_bleu"] for r in confirms if r.data.tags["confirm_of"].startswith("baseline")]
    over_seeds = seed_test(baseline_bleu, means)
    header = next(line for line in text.splitlines() if line.startswith("| config |"))
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
    assert cells["Δ BLEU (95% CI)"].startswith(f"{over_seeds.difference:+.2f} [{over_seeds.low:+.2f}, ")
    assert cells["p (seeds)"] == cells["p (Holm)"] == f"{over_seeds.p_value:.4f}"  # one config: Holm changes nothing
    assert "Welch's t-test" in text and "the test set's variance only" in text
    # the paired tests, secondary: seed 1 of the config against seed 1 of the baseline, seed 2 against seed 2
    from platform.tracking.significance import PAIRED, logged_tokenizer, paired_by_seed, test_outputs

    outputs = {(r.data.tags["confirm_of"], r.data.params["seed"]): test_outputs(client, r.info.run_id, tmp_path / "o")
               for r in confirms}
    base = [outputs[("baseline deguchi2019/baseline", seed)] for seed in ("1", "2")]
    pairs = [(b["hyp"], outputs[(best, seed)]["hyp"], b["ref"]) for b, seed in zip(base, ("1", "2"))]
    tokenizer = logged_tokenizer(client, confirms[0].info.run_id)
    assert {key: cells[key] for key in PAIRED} == paired_by_seed(pairs, tokenizer)
    assert all(re.fullmatch(r"[01]\.\d{4} \([012] of 2 < 0\.05\)", cells[key]) for key in PAIRED), cells
    assert "Confirmation on test" in out and best in out
    # --register-model: the winner (the higher mean test BLEU), its seed run with the better dev BLEU
    means_of = {config: statistics.mean(r.data.metrics["test_bleu"] for r in confirms
                                        if r.data.tags["confirm_of"] == config) for config in by_config}
    winner = max(means_of, key=means_of.get)
    seeds = [r for r in confirms if r.data.tags["confirm_of"] == winner]
    dev = {r.info.run_id: max(m.value for m in client.get_metric_history(r.info.run_id, "dev_bleu")) for r in seeds}
    version = client.get_model_version_by_alias("nmt-papers", "champion")
    assert dev[version.run_id] == max(dev.values()) and version.tags["registered_by"] == "platform.tune"
    assert f"the confirmation's winner: {winner}, run {version.run_id}" in out
    # platform.report prints the table
    from platform import report
    assert report.main(["--experiment", outage.EXPERIMENT, "--out", str(tmp_path / "report"), "--tracking-uri",
                        uri]) == 0
    assert "Confirmation on test: sweep p1" in (tmp_path / "report" / "report.md").read_text()



def test_a_multi_objective_sweep_that_hits_its_time_budget_ends_cleanly_closing_every_trial(ray_cluster, demo_dataset,
                                                                                              tmp_path, capsys):
    import csv

    import optuna

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    # 500 epochs: no trial finishes within the budget on any machine; a machine so slow that no
    # trial reported within it gets no front (the front itself: the early-stopping test below)
    name = "b1"
    args = sweep_args(demo_dataset, tmp_path, "--name", name, "--num-trials", "6", "--max-epochs", "500",
                      "--time-budget", "45s", "--max-concurrent", "2", "--search", "random",
                      "--scheduler", "none", "--objective", "dev_bleu:max", "--objective", "num_parameters:min",
                      "--set", "max_steps_per_epoch=3", "--set", "eval.max_sentences=8", experiment="budget")
    assert tune.main(args) == 0
    out = capsys.readouterr().out
    assert "time budget of 45 s reached" in out, out
    reported = "Pareto front (dev_bleu, num_parameters): trial " in out
    assert reported or "best: trial" not in out, out  # no front only where no trial reported
    client, runs = runs_of(uri, "budget")
    parent = next(r for r in runs if r.data.tags.get("sweep_parent") == name)
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.status == "FINISHED" and parent.data.params["objectives"] == "dev_bleu:max,num_parameters:min"
    assert trials and all(r.info.status == "FINISHED" and r.data.tags.get("stopped") == "time budget"
                          and "error" not in r.data.tags for r in trials), [(r.info.status, r.data.tags)
                                                                              for r in trials]
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path}/runs/{name}/optuna.db")
    assert len(study.directions) == 2 and {t.state.name for t in study.trials} == {"PRUNED"}  # none left RUNNING
    summary = client.download_artifacts(parent.info.run_id, "summary.csv", str(tmp_path))
    rows = list(csv.DictReader(open(summary, encoding="utf-8")))
    assert len(rows) == len(trials) and any(row["pareto"] == "yes" for row in rows) == reported
    assert all(int(row["epochs"]) < 500 for row in rows)  # the budget stopped them, not their epoch limit
    if reported:  # the budget may end a trial before its first report: blank where it had none
        assert all(float(row["num_parameters"]) > 0 for row in rows if row["dev_bleu"] != "")
    else:  # none reported before the budget: no metric columns, every trial at epoch 0
        assert "dev_bleu" not in rows[0] and all(row["epochs"] == "0" for row in rows), rows
    assert_the_cluster_is_free()  # trials stopped while their worker groups started left no group holding CPUs


FROZEN_SPACE = """\
# the baseline at a learning rate too small to change a greedy translation: dev BLEU never improves
model: transformer
params:
  optim.lr: {type: categorical, choices: [1.0e-9]}
  model.dropout: {type: float, low: 0.0, high: 0.3}
"""


def test_a_trial_that_stops_itself_early_is_complete_in_the_summary_the_study_and_its_run(
        ray_cluster, demo_dataset, tmp_path, capsys):
    """``--set patience=1`` in a sweep: the trial whose dev BLEU does not improve on its second
    validation stops there, before its 3 epochs, by itself: COMPLETE (not pruned) in the summary
    and in the Optuna study, its run tagged with the reason, the console saying so.  Two
    objectives: the complete trial is the sweep's Pareto front (console, summary, plot)."""
    import csv

    import optuna

    space = tmp_path / "frozen.yaml"
    space.write_text(FROZEN_SPACE)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert tune.main(sweep_args(demo_dataset, tmp_path, "--name", "e1", "--num-trials", "1", "--max-epochs", "3",
                                "--search", "random", "--scheduler", "none", "--set", "patience=1",
                                "--objective", "dev_bleu:max", "--objective", "num_parameters:min",
                                "--set", "max_steps_per_epoch=2", "--set", "eval.max_sentences=8",
                                experiment="early", space=str(space))) == 0
    out = capsys.readouterr().out
    assert re.search(r"trial \w+ stopped early after epoch 2 \(patience\)", out), out
    assert "Pareto front (dev_bleu, num_parameters): trial " in out, out
    client, runs = runs_of(uri, "early")
    (trial,) = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    assert trial.info.status == "FINISHED" and "pruned" not in trial.data.tags
    assert trial.data.tags["stopped"] == "early stopping: no better dev_bleu for 1 validations"
    assert validated_epochs(client, trial.info.run_id) == [1, 2]
    parent = next(r for r in runs if r.data.tags.get("sweep_parent") == "e1")
    (row,) = csv.DictReader(open(client.download_artifacts(parent.info.run_id, "summary.csv", str(tmp_path)),
                                 encoding="utf-8"))
    assert (row["status"], row["epochs"], row["pareto"]) == ("COMPLETE", "2", "yes")
    assert "optuna/pareto_front.png" in {a.path for a in client.list_artifacts(parent.info.run_id, "optuna")}
    study = optuna.load_study(study_name="e1", storage=f"sqlite:///{tmp_path}/runs/e1/optuna.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE"]


DIVERGING_SPACE = """\
# the baseline at a learning rate that makes the loss NaN in its first updates
model: transformer
params:
  optim.lr: {type: categorical, choices: [1.0e+30]}
  model.dropout: {type: float, low: 0.0, high: 0.3}
"""


def test_a_sweep_whose_every_trial_diverges_fails_each_once_and_exits_non_zero_without_a_best_config(
        ray_cluster, demo_dataset, tmp_path, capsys):
    """Each trial's loss becomes NaN at epoch 1: the trial stops with that reason, Ray restarts
    its workers once (as after any failure), they read that the run diverged and refuse to train
    again; Optuna records FAIL, and the sweep, with no trial finished, ends non-zero in one line
    without offering a best config."""
    from platform.errors import UserError

    space = tmp_path / "diverging.yaml"
    space.write_text(DIVERGING_SPACE)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = sweep_args(demo_dataset, tmp_path, "--name", "all-fail", "--num-samples", "2", "--max-concurrent", "2",
                      "--set", "eval.max_sentences=8", space=str(space))
    with pytest.raises(UserError, match=r"^no trial of the sweep finished; the first failed with: .+") as failed:
        tune.main(args)
    assert "\n" not in str(failed.value)
    out = capsys.readouterr().out
    failed_lines = re.findall(r"^\[ *\d+:\d\d\] trial (\w+) FAILED: (.+)$", out, re.M)
    assert len({trial for trial, _ in failed_lines}) == 2 and all(why.strip() for _, why in failed_lines), out
    assert "best:" not in out and "re-run the best config" not in out
    assert not (tmp_path / "runs" / "all-fail" / "best_config.yaml").exists()
    client, runs = runs_of(uri, "sweep")
    (parent,) = [r for r in runs if r.data.tags.get("sweep_parent") == "all-fail"]
    assert parent.info.status == "FAILED"
    assert "best_config.yaml" not in {a.path for a in client.list_artifacts(parent.info.run_id)}
    diverged = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    assert len(diverged) == 2
    for run in diverged:  # Ray restarted its workers once; they read that it diverged and refused
        assert run.info.status == "FAILED" and "retry_refused" in run.data.tags
        assert "loss became" in run.data.tags["error"]
        assert re.fullmatch(r"diverged at epoch 1, update \d+: loss became (nan|inf|-inf) on \d of \d rank\(s\)",
                            run.data.tags["diverged"])
        assert client.get_metric_history(run.info.run_id, "dev_bleu") == []  # no epoch was trained, before or after
    import optuna

    study = optuna.load_study(study_name="all-fail", storage=f"sqlite:///{tmp_path}/runs/all-fail/optuna.db")
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL"]
