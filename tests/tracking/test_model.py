"""The best checkpoint as an MLflow model (a pyfunc model that translates), logged into a real
store through RunLogger, then loaded back and registered as a user would
(tests/tracking/test_serving.py: what it translates, and served over HTTP)."""

import mlflow
import mlflow.pyfunc
import pytest
import torch
from helpers import tiny_config
from mlflow.entities import LoggedModelStatus
from mlflow.tracking import MlflowClient

from platform.data.batching import ShardedBatches
from platform.data.dataset import PreparedDataset
from platform.tracking import model as mlflow_model
from platform.tracking import runs
from platform.tracking.artifacts import files_of
from platform.tracking.logger import RunLogger
from platform.training.checkpoint import checkpoint_state, save_checkpoint
from platform.training.context import Context
from platform.training.step import build_training


@pytest.fixture()
def checkpoint(demo_dataset, tmp_path):
    config = tiny_config()
    dataset = PreparedDataset.open(demo_dataset)
    torch.manual_seed(3)
    vocab = dataset.meta["vocab_size"]
    model, optimizer, scheduler = build_training(config, vocab["src"], vocab["tgt"], Context())
    state = checkpoint_state(model, optimizer, scheduler, ShardedBatches(dataset.train, config.batching), config,
                             {"epoch": 2, "step": 7, "history": []}, dataset.subword_bytes, dataset.meta)
    return save_checkpoint(state, tmp_path / "checkpoint.pt"), model.state_dict(), dataset


def test_the_best_checkpoint_is_a_registrable_pyfunc_model_of_its_run(checkpoint, tmp_path, monkeypatch):
    path, weights, dataset = checkpoint
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.chdir(tmp_path)  # the store's default artifact root (./mlartifacts) lands here
    run_id = runs.start_run(uri, "models", "r", {}, {}, "")
    params = mlflow_model.save(path, tmp_path / "mlflow_model", dataset.dev.texts["src_text"][0])
    assert params == {"model": "dbsa", "src_lang": dataset.meta["src_lang"], "tgt_lang": dataset.meta["tgt_lang"],
                      "epoch": "2", "step": "7"}
    logger = RunLogger(uri, run_id)
    logger.model(tmp_path / "mlflow_model", 7, params)
    assert logger.close() == []

    client = MlflowClient(uri)
    outputs = client.get_run(run_id).outputs.model_outputs  # the runs table's "Models" column
    assert [output.step for output in outputs] == [7]  # linked at its update
    logged = client.get_logged_model(outputs[0].model_id)
    assert logged.status == LoggedModelStatus.READY
    assert logged.source_run_id == run_id and logged.params["model"] == "dbsa"

    mlflow.set_tracking_uri(uri)
    try:
        loaded = mlflow.pyfunc.load_model(f"models:/{logged.model_id}")
        version = mlflow.register_model(f"models:/{logged.model_id}", "nmt-dbsa")
    finally:
        mlflow.set_tracking_uri(None)
    translator = loaded.unwrap_python_model().trained
    assert translator.model.__class__.__module__.startswith("models.")  # the project's class, from its code/
    assert set(translator.model.state_dict()) == set(weights)
    for name, tensor in translator.model.state_dict().items():  # the checkpoint's weights, exactly
        assert torch.equal(tensor, weights[name]), name
    assert str(version.version) == "1" and version.name == "nmt-dbsa"
    files = {a.path for a in client.list_logged_model_artifacts(logged.model_id)}
    assert {"MLmodel", "requirements.txt", "code", "artifacts", "serving.py", "input_example.json"} <= files, files
    code = {a.path.rsplit("/", 1)[-1] for a in client.list_logged_model_artifacts(logged.model_id, "code")}
    assert code == {"platform", "models"}
    saved = {a.path.rsplit("/", 1)[-1] for a in client.list_logged_model_artifacts(logged.model_id, "artifacts")}
    assert saved == {"checkpoint.pt"}  # weights, config and subword models, without the optimiser state


def test_a_retried_model_log_finishes_the_same_model(checkpoint, tmp_path, monkeypatch):
    """An outage between creating the model and linking it: the retry must not make a second one."""
    path, _, dataset = checkpoint
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.chdir(tmp_path)
    run_id = runs.start_run(uri, "models", "r", {}, {}, "")
    params = mlflow_model.save(path, tmp_path / "m", dataset.dev.texts["src_text"][0])
    files, created = files_of(tmp_path / "m"), {}

    class Flaky(MlflowClient):
        failures = 1

        def log_model_artifacts(self, *args, **kwargs):
            if Flaky.failures:
                Flaky.failures -= 1
                raise ConnectionError("server went away")
            return super().log_model_artifacts(*args, **kwargs)

    flaky = Flaky(uri)
    with pytest.raises(ConnectionError):
        mlflow_model.log(flaky, run_id, files, 2, params, created)
    model_id = mlflow_model.log(flaky, run_id, files, 2, params, created)
    experiment = MlflowClient(uri).get_run(run_id).info.experiment_id
    assert [m.model_id for m in MlflowClient(uri).search_logged_models([experiment])] == [model_id]


def test_a_model_mlflow_cannot_save_leaves_the_finished_training_finished(tmp_path, monkeypatch, capsys):
    """Rank 0's end of training with a best checkpoint MLflow cannot turn into a model: a warning
    and the tag ``mlflow_model_error``, not a failed run after all its epochs."""
    from platform.launch.worker import RayHooks

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.chdir(tmp_path)
    run_id = runs.start_run(uri, "models", "r", {}, {}, "")
    broken = tmp_path / "checkpoint.pt"
    broken.write_bytes(b"not a checkpoint")
    hooks = RayHooks.__new__(RayHooks)  # rank 0's hooks, without a Ray Train context
    hooks.logger, hooks.workdir, hooks.example_source = RunLogger(uri, run_id), tmp_path, "a b c"
    hooks._log_mlflow_model(broken)
    assert hooks.logger.close() == []
    run = MlflowClient(uri).get_run(run_id)
    assert run.data.tags["mlflow_model_error"] and not run.outputs.model_outputs
    assert "not saved as an MLflow model" in capsys.readouterr().err


def test_a_sweeps_best_model_linked_to_its_parent_twice_is_linked_once(checkpoint, tmp_path, monkeypatch):
    """A resumed sweep links its best trial's model to the parent run again (the store refuses
    a duplicate link, which would fail the resumed sweep); the second link adds nothing."""
    path, _, dataset = checkpoint
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.chdir(tmp_path)
    parent = runs.start_run(uri, "models", "sweep", {}, {}, "")
    trial = runs.start_run(uri, "models", "trial", {}, {}, "", parent)
    params = mlflow_model.save(path, tmp_path / "mlflow_model", dataset.dev.texts["src_text"][0])
    logger = RunLogger(uri, trial)
    logger.model(tmp_path / "mlflow_model", 7, params)
    assert logger.close() == []
    assert runs.link_models(uri, trial, parent) == 1
    assert runs.link_models(uri, trial, parent) == 1  # the resumed sweep's summary: no error
    client = MlflowClient(uri)
    linked = [o.model_id for o in client.get_run(parent).outputs.model_outputs]
    assert linked == [o.model_id for o in client.get_run(trial).outputs.model_outputs] and len(linked) == 1
