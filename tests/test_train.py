"""platform.train on a real local Ray cluster with a real MLflow sqlite store."""

import getpass
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import mlflow.pyfunc
import pytest
import torch
from helpers import ROOT, run_in_process, run_module, runs_of, sacrebleu_scores, validated_epochs, wait_for

from models import MODELS
from platform import train

pytestmark = pytest.mark.slow


def smoke_args(dataset, tmp_path, experiment, *extra):
    return ["--data", str(dataset), "--smoke", "--experiment", experiment, "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db",
            "--storage-path", str(tmp_path / "runs"), "--max-failures", "0", *extra]


# the model a smoke run trains through Ray Train and MLflow here (DBSA trains with 2 workers in
# tests/launch/test_listening.py); every other model trains in the same loop (``fit``) in this process:
# test_every_other_model_trains_in_smoke_mode_in_the_same_loop_and_its_best_checkpoint_is_its_pyfunc_model
THROUGH_RAY = ("tree2seq",)


@pytest.mark.parametrize("model", THROUGH_RAY)
def test_a_model_trains_in_smoke_mode_through_ray_and_logs_dev_bleu(ray_cluster, demo_dataset, tmp_path, monkeypatch,
                                                                    model):
    """A smoke run through Ray Train and MLflow.  tree2seq's run names its store as README's
    ``sqlite:///heldout.db`` form does, relative to where the user runs the command: rank 0 and
    the relay run in Ray's copy of the repository, where the same words would name another,
    empty store, yet every metric lands in the user's."""
    args = ["--model", model, *smoke_args(demo_dataset, tmp_path, "smoke")]
    if model == "tree2seq":
        monkeypatch.chdir(tmp_path)
        args[args.index("--tracking-uri") + 1] = "sqlite:///mlflow.db"  # tmp_path/mlflow.db, named relatively
    assert train.main(args) == 0
    client, runs = runs_of(f"sqlite:///{tmp_path}/mlflow.db", "smoke")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert "dev_bleu" in run.data.metrics and "dev_chrf" in run.data.metrics and "tokens_per_s" in run.data.metrics
    assert [m.step for m in client.get_metric_history(run.info.run_id, "dev_bleu")] == [8, 16]  # updates
    assert run.data.params["model"] == model and run.data.params["workers"] == "1"
    assert run.data.tags["mlflow.source.name"] == "platform.train"  # the runs table's Source column
    assert run.info.user_id == run.data.tags["mlflow.user"] == getpass.getuser()  # its User column
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "best", "plots", "dev_hypotheses"} <= artifacts
    # beside the store, not in Ray's temporary copy of the repository where the relay runs
    assert client.get_experiment_by_name("smoke").artifact_location.startswith(str(tmp_path))
    if model == "tree2seq":  # the sqlite store's artifacts: beside the relatively named mlflow.db
        assert (tmp_path / "mlruns").is_dir()
    # the best checkpoint as an MLflow pyfunc model of the run, with the same weights (its input
    # example, CoNLL-U for the tree models, was translated when it was saved)
    (output,) = run.outputs.model_outputs
    assert output.step == int(run.data.tags["best_step"]) == 8 * int(run.data.tags["best_epoch"])
    best = torch.load(client.download_artifacts(run.info.run_id, "best/checkpoint.pt", str(tmp_path)),
                      weights_only=True)
    loaded = mlflow.pyfunc.load_model(client.get_logged_model(output.model_id).artifact_location)
    weights = loaded.unwrap_python_model().trained.model.state_dict()
    assert weights.keys() == best["model"].keys()
    assert all(torch.equal(tensor, best["model"][name]) for name, tensor in weights.items())


@pytest.mark.parametrize("model", sorted(set(MODELS) - set(THROUGH_RAY)))
def test_every_other_model_trains_in_smoke_mode_in_the_same_loop_and_its_best_checkpoint_is_its_pyfunc_model(
        demo_dataset, tmp_path, model):
    """What ``platform.train --model MODEL --smoke`` trains (validated on 8 dev sentences),
    through the loop every Ray Train worker runs (``fit``), without Ray: dev BLEU and chrF at
    updates 8 and 16, and the best checkpoint saved as the MLflow pyfunc model the worker logs,
    with the same weights, that translates its input example (a dev sentence, CoNLL-U for the
    tree models)."""
    from platform.data.dataset import PreparedDataset
    from platform.tracking import model as mlflow_model
    from platform.training import recipes
    from platform.training.config import resolve_config
    from platform.training.context import Context
    from platform.training.hooks import LocalHooks
    from platform.training.loop import fit

    recipe, _ = recipes.recipe_for(model, None)
    config = resolve_config(model, "smoke", recipe=recipe, overrides=["eval.max_sentences=8"])  # --smoke
    dataset = PreparedDataset.open(demo_dataset)
    history = fit(config, dataset, Context(), LocalHooks(tmp_path, config), log=lambda line: None)
    assert [int(m["step"]) for m in history if "dev_bleu" in m] == [8, 16]  # updates
    assert all("dev_chrf" in m and "tokens_per_s" in m for m in history)
    best = torch.load(tmp_path / "best.pt", weights_only=True)
    params = mlflow_model.save(tmp_path / "best.pt", tmp_path / "mlflow_model", dataset.dev.texts["src_text"][0])
    assert params["model"] == model and int(params["step"]) == best["progress"]["step"]
    loaded = mlflow.pyfunc.load_model(str(tmp_path / "mlflow_model"))
    weights = loaded.unwrap_python_model().trained.model.state_dict()
    assert weights.keys() == best["model"].keys()
    assert all(torch.equal(tensor, best["model"][name]) for name, tensor in weights.items())


def test_a_gpu_worker_on_a_cluster_without_gpus_is_one_line_before_any_work(ray_cluster, tmp_path):
    """Ray Train would wait for the GPU forever (its worker group retried for minutes); the
    check refuses it in seconds, before the demo corpus or any run is made."""
    from platform.errors import UserError

    with pytest.raises(UserError) as refused:  # without the check: the worker group waits (the test's timeout)
        train.main(["--model", "transformer", "--gpus-per-worker", "1", "--cpus-per-worker", "1", "--data", "demo",
                    "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--storage-path", str(tmp_path / "runs")])
    assert str(refused.value) == "the cluster (4 CPUs, 0 GPUs) cannot hold 1 worker(s) × 1 CPUs / 1 GPUs"
    assert not (tmp_path / "runs").exists() and not runs_of(f"sqlite:///{tmp_path}/mlflow.db", "syntax-nmt")[1]


def test_train_cli_as_a_user_runs_it(own_cluster, demo_dataset, tmp_path, capsys):
    """`python -m platform.train` from the repository root, starting its own Ray; a bad key as
    its ``__main__`` answers it, in this process."""
    result = run_module("platform.train", "--model", "transformer", *smoke_args(demo_dataset, tmp_path, "cli"),
                        "--log-every", "4", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    shown = result.stdout + result.stderr
    assert "epoch 2/2  update 16  train_loss" in shown  # each validation (smoke epochs: 8 updates)
    assert "update 12  epoch 2  loss " in shown and " tok/s " in shown and " eta 0:" in shown  # every 4 updates
    _, runs = runs_of(f"sqlite:///{tmp_path}/mlflow.db", "cli")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    bad = run_in_process(train.main, ["--model", "transformer", "--set", "optim.learning_rate=1", "--data",
                                      demo_dataset], capsys)
    assert bad.returncode == 2 and "unknown config key 'optim.learning_rate'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_update_limits_then_continue_the_finished_run_then_fine_tune_it_in_a_new_run(ray_cluster, demo_dataset,
                                                                                     tanaka_dataset, tmp_path):
    """``--max-updates 12 --log-every 4 --validate-every 6`` over smoke epochs of 8 updates, no
    epoch limit: train metrics at updates 4, 8, 12 (and the validation's own window at 6), dev
    BLEU at 6 and 12, Ray checkpoints of updates 6 and 12, and the run stops at 12 (the progress
    lines: ``test_train_cli_as_a_user_runs_it``, tests/training/test_loop.py).  ``--continue``
    trains that finished run on to a higher limit in the same run; ``--init-from`` its run id
    starts a new run from its best weights, which score the source's best checkpoint's dev loss,
    BLEU and chrF before any update; weights for another vocabulary are refused before any work."""
    from platform.errors import UserError

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = ["--model", "transformer", *smoke_args(demo_dataset, tmp_path, "warm")]
    intervals = ["--log-every", "4", "--validate-every", "6"]
    assert train.main([*args, "--name", "source", "--max-updates", "12", *intervals]) == 0
    client, (run,) = runs_of(uri, "warm")
    assert run.info.status == "FINISHED" and run.data.params["max_updates"] == "12"
    history = {key: [int(m.step) for m in client.get_metric_history(run.info.run_id, key)]
               for key in ("train_loss", "lr", "grad_norm", "dev_bleu", "epoch")}
    assert history["dev_bleu"] == [6, 12]
    assert history["train_loss"] == [4, 6, 8, 12]  # update 12's window is the progress entry's, logged once
    assert history["grad_norm"] == history["lr"] == history["train_loss"] and history["epoch"] == [4, 6, 8, 12]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "epoch")] == [1, 1, 1, 2]
    checkpoints = sorted((tmp_path / "runs" / "source").glob("checkpoint_*/checkpoint.pt"))
    assert [torch.load(path, weights_only=True)["progress"]["step"] for path in checkpoints] == [6, 12]

    assert train.main([*args, "--name", "source", "--max-updates", "18", *intervals, "--continue",
                       "--register-model", "nmt-warm"]) == 0
    client, (source,) = runs_of(uri, "warm")
    assert source.info.status == "FINISHED" and source.data.tags["continued_to"] == "max_updates=18"
    # registered: a version of its logged model, tagged with its metrics and recipe, the alias on it
    version = client.get_model_version_by_alias("nmt-warm", "champion")
    (logged,) = source.outputs.model_outputs
    assert (str(version.version), version.run_id, version.tags["model_id"]) == ("1", source.info.run_id,
                                                                               logged.model_id)
    assert version.tags["metric.dev_bleu"] == f"{source.data.metrics['dev_bleu']:.6g}"
    assert version.tags["recipe"] == source.data.tags["recipe"] and version.tags["registered_by"] == "platform.train"
    assert [int(m.step) for m in client.get_metric_history(source.info.run_id, "dev_bleu")] == [6, 12, 18]
    best_step = int(source.data.tags["best_step"])

    def dev_at(run_id: str, step: int) -> dict[str, float]:
        return {key: next(m.value for m in client.get_metric_history(run_id, key) if m.step == step)
                for key in ("dev_loss", "dev_bleu", "dev_chrf")}

    assert train.main([*args, "--name", "tuned", "--init-from", "models:/nmt-warm@champion", "--max-updates",
                       "4"]) == 0
    client, found = runs_of(uri, "warm")
    (tuned,) = [run for run in found if run.info.run_id != source.info.run_id]
    assert tuned.info.status == "FINISHED" and tuned.data.tags["init_from_run"] == source.info.run_id
    assert [int(m.step) for m in client.get_metric_history(tuned.info.run_id, "dev_bleu")] == [0, 4]
    # before any update, the loaded weights score exactly what the source's best checkpoint scored
    assert dev_at(tuned.info.run_id, 0) == pytest.approx(dev_at(source.info.run_id, best_step), abs=1e-9)
    (parent,) = source.outputs.model_outputs
    inputs = client.get_run(tuned.info.run_id).inputs.model_inputs  # (search_runs leaves model inputs out)
    assert [m.model_id for m in inputs] == [parent.model_id]  # the parent model

    with pytest.raises(UserError, match=r"--init-from .*: its src subword model is not the one .* was encoded with"):
        train.main(["--model", "transformer", *smoke_args(tanaka_dataset, tmp_path, "warm"), "--init-from",
                    source.info.run_id])
    assert len(runs_of(uri, "warm")[1]) == 2  # no run for the refused one


def test_mlflows_deprecated_file_store_is_refused_before_any_work(demo_dataset, tmp_path, monkeypatch):
    """A ``file:`` tracking URI (MLflow's deprecated file store) is refused in one line before
    Ray starts or anything is written (a relative sqlite URI keeps every metric:
    test_a_model_trains_in_smoke_mode_through_ray_and_logs_dev_bleu[tree2seq])."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path}/file-store")
    refused = run_module("platform.train", "--model", "transformer", "--data", str(demo_dataset), "--smoke",
                         "--storage-path", str(tmp_path / "runs"), "--max-failures", "0", "--experiment", "rel-file")
    assert refused.returncode != 0 and "file store is deprecated" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "file-store").exists()


def test_a_rerun_with_the_same_name_continues_its_run(ray_cluster, demo_dataset, tmp_path):
    """Killed: the rerun resumes the Ray checkpoints *and* the MLflow run; finished: it says so."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = ["--model", "transformer", "--smoke", "--data", str(demo_dataset), "--max-epochs", "3", "--set",
            "max_steps_per_epoch=30", "--experiment", "rerun", "--tracking-uri", uri, "--storage-path",
            str(tmp_path / "runs"), "--name", "again"]
    address = ray_cluster.get_runtime_context().gcs_address  # the driver joins the session's cluster
    with open(tmp_path / "driver.log", "w") as log:
        driver = subprocess.Popen([sys.executable, "-m", "platform.train", *args, "--address", address], cwd=ROOT,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        snapshot = tmp_path / "runs" / "again" / "checkpoint_manager_snapshot.json"
        wait_for(lambda: (snapshot.exists() and "checkpoint_dir_name" in snapshot.read_text()
                          or driver.poll() is not None), 300, "the first checkpoint")
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the whole driver, as when an SSH session drops
        driver.wait(timeout=60)
    _, found = runs_of(uri, "rerun")
    assert [run.info.status for run in found] == ["RUNNING"]  # what the killed driver left

    assert train.main(args) == 0
    client, found = runs_of(uri, "rerun")
    assert len(found) == 1
    run = found[0]
    assert run.info.status == "FINISHED" and int(run.data.tags["resumed_from_epoch"]) >= 1
    assert sorted(set(validated_epochs(client, run.info.run_id))) == [1, 2, 3]

    again = run_module("platform.train", *args, timeout=120)  # answered before Ray starts
    assert again.returncode == 0 and "has finished already" in again.stdout, again.stderr[-2000:]
    assert run.info.run_id in again.stdout and len(runs_of(uri, "rerun")[1]) == 1


def leftovers() -> set[Path]:
    """What the platform's processes (Train workers, the CLIs) keep in the system's temporary directory."""
    return {path for pattern in ("nmt-*", "ckpt-*") for path in Path(tempfile.gettempdir()).glob(pattern)}


def test_evaluate_on_tanaka_agrees_with_sacrebleu_on_the_written_files(ray_cluster, tanaka_dataset, tanaka, tmp_path,
                                                                     capsys, monkeypatch):
    """evaluate and translate as their ``__main__`` runs them, in this process (as processes:
    tests/test_inference.py); sacreBLEU's own command as a process."""
    from platform import evaluate, translate

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    before = leftovers()
    assert train.main(["--model", "transformer", *smoke_args(tanaka_dataset, tmp_path, "tanaka"),
                       "--set", "max_steps_per_epoch=30"]) == 0
    _, runs = runs_of(uri, "tanaka")
    run_id = runs[0].info.run_id
    out = tmp_path / "tanaka-test"
    result = run_in_process(evaluate.main, ["--run", run_id, "--test", tanaka / "test", "--src", "ja", "--tgt", "en",
                                            "--beam", "2", "--tracking-uri", uri, "--out", out, "--register-model",
                                            "nmt-tanaka", "--metrics", "bleu,chrf,chrf++,ter"], capsys)
    assert result.returncode == 0, result.stderr[-3000:]
    hyps = (tmp_path / "tanaka-test.hyp").read_text().splitlines()
    refs = (tmp_path / "tanaka-test.ref").read_text().splitlines()
    assert len(hyps) == len(refs) == 500
    cli = subprocess.run([sys.executable, "-m", "sacrebleu", str(tmp_path / "tanaka-test.ref"), "-i",
                          str(tmp_path / "tanaka-test.hyp"), "-b", "-w", "4"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    client, runs = runs_of(uri, "tanaka")
    logged = runs[0].data.metrics["test_bleu"]
    assert float(cli.stdout.strip()) == pytest.approx(logged, abs=1e-3)
    # registered with the scores it was just tested with (MLflow's registry, alias champion)
    version = client.get_model_version_by_alias("nmt-tanaka", "champion")
    assert version.run_id == run_id and version.tags["registered_by"] == "platform.evaluate"
    assert version.tags["metric.test_bleu"] == f"{logged:.6g}" and "registered model 'nmt-tanaka'" in result.stderr
    # the written sacrebleu commands reproduce all five scores (chrF++ and TER asked for with --metrics)
    metrics = runs[0].data.metrics
    assert sacrebleu_scores(tmp_path / "tanaka-test.sacrebleu.sh") == pytest.approx(
        [metrics["test_bleu"], metrics["test_chrf"], metrics["test_bleu_tok"], metrics["test_ter"],
         metrics["test_chrfpp"]], abs=1e-3)  # chrF++ on a line of its own, last
    assert "test_chrf" in runs[0].data.metrics and "test_bleu_tok" in runs[0].data.metrics
    translated = run_in_process(translate.main, ["--run", run_id, "--tracking-uri", uri, "--beam", "2"], capsys,
                                monkeypatch, stdin="私 は 学生 です 。\n猫 が 好き 。\n")
    assert translated.returncode == 0, translated.stderr[-2000:]
    assert len(translated.stdout.splitlines()) == 2
    # the run kept its 2 checkpoints' weights (smoke: 2 epochs of 30 updates) in MLflow, named by
    # update; their average is evaluated and logged apart
    assert sorted(a.path for a in client.list_artifacts(run_id, "last_checkpoints")) == [
        "last_checkpoints/update_00000030.pt", "last_checkpoints/update_00000060.pt"]
    averaged = run_in_process(evaluate.main, ["--run", run_id, "--test", tanaka / "test", "--src", "ja", "--tgt", "en",
                                              "--beam", "2", "--tracking-uri", uri, "--out", tmp_path / "avg",
                                              "--average-last", "2"], capsys)
    assert averaged.returncode == 0, averaged.stderr[-3000:]
    metrics = client.get_run(run_id).data.metrics
    assert {"test_avg2_bleu", "test_avg2_chrf", "test_avg2_bleu_tok"} <= set(metrics)
    assert metrics["test_bleu"] == logged  # the best checkpoint's scores stay as they were
    # nothing left behind: each epoch's checkpoint copy, the worker's files, the downloaded checkpoints
    assert leftovers() - before == set()
