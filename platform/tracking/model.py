"""The best checkpoint as an MLflow model: a ``python_function`` (pyfunc) model that
translates, so ``mlflow.pyfunc.load_model(uri).predict(["a sentence"])`` and ``mlflow models
serve -m URI`` work, MLflow's UI shows it in the runs table's "Models" column and on the
experiment's Models tab, and it can be registered (``mlflow.register_model("models:/<model_id>",
NAME)``) and used by ``platform.train --init-from models:/NAME/VERSION``.

What one model directory holds (``save``):

- ``platform/serving.py`` as MLflow's "model from code" (the ``Translator`` it loads);
- the artifact ``checkpoint``: the best checkpoint's weights, resolved config, subword models
  and prepare settings (not its optimiser state), which ``platform.inference.Trained`` loads;
- ``code/platform`` and ``code/models``: this repository's packages, so it loads where the
  repository is absent;
- a signature (source sentences, strings, in; translations out; ``beam`` and
  ``lenpen`` params defaulting to the run's decoding) and an input example, a dev sentence
  (as CoNLL-U for the models that read source trees);
- ``requirements.txt``: torch, sentencepiece, pyarrow, sacremoses, sacrebleu and pyyaml as
  saved with (given, not inferred: MLflow's inference would load the model once more in a
  subprocess).

The checkpoint stays the training's own artifact (``best/checkpoint.pt``, which ``platform.
evaluate``/``translate --run`` use); this is the same weights, in a form MLflow can serve.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from pathlib import Path

from platform.tracking.artifacts import upload_model_files
from platform.training.checkpoint import config_from_checkpoint, load_checkpoint, save_checkpoint

MODEL_NAME = "model"  # the logged model's name (MLflow's default artifact name)
SERVING = Path(__file__).parents[1] / "serving.py"  # the model's code, run by MLflow to load it (not imported here)
CHECKPOINT = "checkpoint"  # its artifact: the best checkpoint's weights, config and subword models
PROGRESS_BARS = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
SERVING_KEYS = ("format_version", "model", "config", "subword_models", "dataset_meta", "progress")
REQUIREMENTS = ("torch", "sentencepiece", "pyarrow", "sacremoses", "sacrebleu", "pyyaml", "numpy")


def import_mlflow() -> None:
    """Import what ``save`` needs of MLflow in the calling thread, before the process starts a
    thread that may import MLflow too (a ``RunLogger``'s sender, which unpickles MLflow's
    objects and errors from the relay).  Two threads importing submodules of one package for
    the first time can deadlock on Python's module locks; Python breaks the cycle by handing
    one of them the half-imported package, and ``save`` then failed with "partially initialized
    module 'mlflow' has no attribute 'version'" (a restarted worker group's rank 0 saw it: its
    sender imported MLflow for an outage's error while ``save`` did).  It costs rank 0 about
    a second of CPU at its start that ``save`` would spend at its end."""
    import importlib

    for name in ("mlflow.pyfunc", "mlflow.models"):
        importlib.import_module(name)


def save(checkpoint: Path, directory: Path, example: str) -> dict[str, str]:
    """Write the MLflow model of ``checkpoint`` into ``directory`` (which must not exist), with
    ``example`` (a source sentence, words separated by spaces) as its input example; returns
    the logged model's params (model name, languages, best epoch and update)."""
    import mlflow.pyfunc
    from mlflow.models import infer_signature

    import models  # the packages themselves, shipped with the MLflow model as its code
    import platform as this_package
    from models import MODELS

    state = load_checkpoint(checkpoint)
    config = config_from_checkpoint(state)
    meta = state["dataset_meta"]
    slim = directory.parent / f"{directory.name}-checkpoint" / "checkpoint.pt"
    save_checkpoint({key: state[key] for key in SERVING_KEYS if key in state}, slim)
    needs_trees = MODELS[config.model.name].source_syntax is not None
    source = [flat_conllu(example.split()) if needs_trees else example]
    params = {"beam": int(config.decode.beam), "lenpen": float(config.decode.alpha)}
    with _quiet_mlflow():
        mlflow.pyfunc.save_model(
            str(directory), python_model=str(SERVING), artifacts={CHECKPOINT: str(slim)},
            code_paths=[str(Path(this_package.__file__).parent), str(Path(models.__file__).parent)],
            signature=infer_signature(source, ["translation"], params=params), input_example=(source, params),
            pip_requirements=requirements(meta.get("segmentation", {}).get("src")))
    return {"model": config.model.name, "src_lang": meta["src_lang"], "tgt_lang": meta["tgt_lang"],
            "epoch": str(state["progress"]["epoch"]), "step": str(state["progress"]["step"])}


def flat_conllu(words: list[str]) -> str:
    """``words`` as one CoNLL-U sentence whose every word hangs from the first: the format of
    a tree model's input, for the input example (real input comes from ``platform.parse``)."""
    rows = [f"{i}\t{word}\t_\t_\t_\t_\t{0 if i == 1 else 1}\t{'root' if i == 1 else 'dep'}\t_\t_"
            for i, word in enumerate(words, start=1)]
    return "\n".join(rows) + "\n"


def requirements(segmenter: dict | str | None = None) -> list[str]:
    """The served model's pip requirements, pinned as installed here; with a recorded source
    ``segmenter`` (``data.parsing``), spaCy and its pipeline's package too (e.g. ``ja-ginza``),
    since the model segments plain input with it."""
    from importlib.metadata import PackageNotFoundError, version

    pinned = []
    names = list(REQUIREMENTS)
    if isinstance(segmenter, dict):
        names += ["spacy", segmenter["pipeline"].replace("_", "-")]
    for name in names:
        try:
            pinned.append(f"{name}=={version(name).split('+')[0]}")
        except PackageNotFoundError:
            continue
    return pinned


@contextlib.contextmanager
def _quiet_mlflow():
    """Without MLflow's warnings and without the progress bar it draws for each file it copies."""
    pyfunc_log = logging.getLogger("mlflow")
    level, bars = pyfunc_log.level, os.environ.get(PROGRESS_BARS)
    pyfunc_log.setLevel(logging.ERROR)
    os.environ[PROGRESS_BARS] = "false"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        pyfunc_log.setLevel(level)
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
    add_outputs(mlflow_client, run_id, [LoggedModelOutput(model_id, step)])
    return model_id


def add_outputs(mlflow_client, run_id: str, outputs: list) -> int:
    """Link logged models (``LoggedModelOutput``s) to ``run_id`` as its outputs, each once: a
    retry after a link that reached the store but whose answer was lost, or an interrupted
    sweep's resume, must not link one again (the store refuses a duplicate); returns how many
    were new."""
    found = mlflow_client.get_run(run_id).outputs
    linked = {o.model_id for o in (found.model_outputs if found else [])}
    new = [o for o in outputs if o.model_id not in linked]
    if new:
        mlflow_client.log_outputs(run_id, new)
    return len(new)
