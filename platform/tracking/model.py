"""The best checkpoint as an MLflow model: the PyTorch flavour, so MLflow's UI shows it in the
runs table's "Models" column and on the experiment's Models tab, and it can be registered
(``mlflow.register_model("models:/<model_id>", NAME)``) and loaded with
``mlflow.pytorch.load_model``.

What one model directory holds (``save``):

- the ``nn.Module`` with the best checkpoint's weights (MLflow's pickled PyTorch model, not its
  ``pt2`` graph format: that one traces ``forward`` on an example tensor, while our models take
  ``Source`` batches with trees), with the ``models`` package as its code (``code/models``), so it
  loads where this repository is absent;
- beside it, as MLflow "extra files": the source and target SentencePiece models, the resolved
  ``config.yaml`` and ``dataset.json`` (languages, vocabulary sizes and the prepare settings a
  new input must be encoded with);
- ``requirements.txt`` naming the torch and sentencepiece it was saved with (given, not inferred:
  MLflow's inference would load the model once more in a subprocess).

The checkpoint stays the training's own artifact (``best/checkpoint.pt``, which ``platform.
evaluate``/``translate --run`` use); this is the same weights in MLflow's format.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from pathlib import Path

from platform import config as config_io
from platform.tracking.artifacts import upload_model_files
from platform.training.checkpoint import load_checkpoint, model_from_checkpoint

MODEL_NAME = "model"  # the logged model's name (MLflow's default artifact name)
PROGRESS_BARS = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


def save(checkpoint: Path, directory: Path) -> dict[str, str]:
    """Write the MLflow model of ``checkpoint`` into ``directory`` (which must not exist);
    returns the logged model's params (model name, languages, best epoch and update)."""
    import mlflow.pytorch
    import sentencepiece
    import torch

    import models

    state = load_checkpoint(checkpoint)
    model, config = model_from_checkpoint(state)
    meta = state["dataset_meta"]
    extras = directory.parent / f"{directory.name}-extra"
    extras.mkdir(parents=True, exist_ok=True)
    for side, tensor in state["subword_models"].items():  # exactly the subword models it was trained with
        (extras / f"{side}.model").write_bytes(bytes(tensor.numpy().tobytes()))
    (extras / "config.yaml").write_text(config_io.dump_yaml(config), encoding="utf-8")
    (extras / "dataset.json").write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    with _quiet_mlflow():
        mlflow.pytorch.save_model(
            model, str(directory), serialization_format="pickle", code_paths=[str(Path(models.__file__).parent)],
            extra_files=[str(path) for path in sorted(extras.iterdir())],
            pip_requirements=[f"torch=={torch.__version__.split('+')[0]}", f"sentencepiece=={sentencepiece.__version__}"])
    return {"model": config.model.name, "src_lang": meta["src_lang"], "tgt_lang": meta["tgt_lang"],
            "epoch": str(state["progress"]["epoch"]), "step": str(state["progress"]["step"])}


@contextlib.contextmanager
def _quiet_mlflow():
    """Without MLflow's warnings about pickle (the reason is in this module's docstring) and a
    missing signature (the module takes ``Source`` batches, not a DataFrame), and without the
    progress bar it draws for each extra file it copies."""
    pytorch_log = logging.getLogger("mlflow.pytorch")
    level, bars = pytorch_log.level, os.environ.get(PROGRESS_BARS)
    pytorch_log.setLevel(logging.ERROR)
    os.environ[PROGRESS_BARS] = "false"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        pytorch_log.setLevel(level)
        if bars is None:
            os.environ.pop(PROGRESS_BARS, None)
        else:
            os.environ[PROGRESS_BARS] = bars


def log(mlflow_client, run_id: str, files: dict[str, bytes], step: int, params: dict[str, str],
        created: dict[str, str]) -> str:
    """Log a saved model directory (``artifacts.files_of``) as an MLflow 3 logged model of ``run_id``: create
    it, upload its files, mark it READY and link it to the run as an output at ``step``; returns
    its id.  ``created`` remembers the id across retries (an outage between the steps), so a
    retried call finishes the same model instead of creating a second one."""
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus

    if "model_id" not in created:
        experiment_id = mlflow_client.get_run(run_id).info.experiment_id
        created["model_id"] = mlflow_client.create_logged_model(
            experiment_id, name=MODEL_NAME, source_run_id=run_id, params=params, model_type="translation").model_id
    model_id = created["model_id"]
    upload_model_files(mlflow_client, model_id, files)
    mlflow_client.finalize_logged_model(model_id, LoggedModelStatus.READY)
    mlflow_client.log_outputs(run_id, [LoggedModelOutput(model_id, step)])
    return model_id
