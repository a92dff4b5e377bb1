"""An MLflow run's life: opened with its params, tags and resolved config by the process that
launches the training (the ``platform.train`` driver, or a Tune trial), found again on a retry,
and closed as FINISHED or FAILED (the error as a tag) — a run is never left RUNNING.  During
training only rank 0 writes to it (``tracking.logger``).  Params are named by the one knob
naming rule (``training.config.knob_name``).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from platform import config_io
from platform.errors import UserError
from platform.redaction import redact, redact_values
from platform.tracking.artifacts import upload_bytes
from platform.tracking.model import add_outputs
from platform.tracking.spool import Spool, message_of
from platform.tracking.store import client, on_client, run_status, terminate
from platform.training.config import knob_name

ROOT = Path(__file__).resolve().parents[2]


def git_commit() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if commit.returncode:
        return "unknown"
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def launching_user() -> str:
    """Who launched the run (the runs table's User column; MLflow reads the ``mlflow.user`` tag)."""
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container without a passwd entry)
        return "unknown"


def dataset_sha256(meta: dict[str, Any]) -> str:
    """One hash of a prepared dataset: its inputs' hashes and its prepare settings."""
    payload = json.dumps({"inputs": sorted(meta.get("inputs_sha256", {}).values()), "config": meta.get("config")},
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def log_dataset_inputs(tracking_uri: str, run_id: str, dataset: str, meta: dict[str, Any]) -> None:
    """The prepared dataset's splits as the run's MLflow inputs (the runs table's "Dataset"
    column): one per split, named after the dataset, with its context (``train``/``dev``/``test``),
    a digest of its inputs and prepare settings, its Parquet file and its size."""
    on_client(client(tracking_uri), _log_dataset_inputs, run_id, dataset, meta)


def _log_dataset_inputs(mlflow_client, run_id: str, dataset: str, meta: dict[str, Any]) -> None:
    from mlflow.entities import Dataset, DatasetInput, InputTag

    dataset = redact(dataset)
    name = dataset.rstrip("/").rsplit("/", 1)[-1]
    inputs = []
    for split, info in meta.get("splits", {}).items():
        files = info.get("files", [])
        hashes = sorted(digest for path, digest in meta.get("inputs_sha256", {}).items() if path in files)
        digest = hashlib.sha256(json.dumps({"inputs": hashes, "config": meta.get("config")}, sort_keys=True).encode())
        source = {"uri": f"{dataset.rstrip('/')}/{split}.parquet"}
        profile = {"pairs": info.get("pairs_written"), "src_lang": meta.get("src_lang"),
                   "tgt_lang": meta.get("tgt_lang")}
        source_type = dataset.split("://", 1)[0] if "://" in dataset else "local"
        inputs.append(DatasetInput(
            Dataset(name=name, digest=digest.hexdigest()[:16], source_type=source_type, source=json.dumps(source),
                    profile=json.dumps(profile)),
            tags=[InputTag("mlflow.data.context", split)]))
    if inputs:
        mlflow_client.log_inputs(run_id, datasets=inputs)


def run_params(train_config, extra: dict[str, Any]) -> dict[str, str]:
    """Flat params: model fields under their paper names (p_enc, k_clip, ...), other sections dotted."""
    params = {knob_name(key): value for key, value in config_io.flat_dict(train_config).items()
              if key != "model.name"}
    params.update(extra)
    return {key: redact(str(value))[:6000] for key, value in params.items()}


# MLflow 3's UI opens an experiment without this tag on its GenAI "Overview" of traces (empty
# here); marked as model training, it opens on the runs table
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


RAY_COPY = "/runtime_resources/working_dir_files/"  # where Ray unpacks a job's working_dir


def artifact_location(tracking_uri: str, experiment: str) -> str | None:
    """Where a new experiment of a local sqlite store keeps its artifacts: ``mlruns/`` beside the
    database file (None for a server, which decides itself).

    MLflow's default is ``./mlruns`` in the working directory *of the process that creates the
    experiment*; that is often the relay actor or a trial, whose working directory is Ray's
    temporary copy of the repository (``/tmp/ray/session_*/runtime_resources/...``), so every
    checkpoint, plot and model would live there and vanish with Ray's session files."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    database = Path(tracking_uri[len("sqlite:///"):])
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", experiment)[:40]  # any name, one safe directory
    return str(database.parent / "mlruns" / f"{readable}-{hashlib.sha256(experiment.encode()).hexdigest()[:8]}")


def experiment_id(tracking_uri: str, name: str) -> str:
    """The experiment ``name`` (created, or restored if deleted), marked as model training."""
    return _experiment_id(client(tracking_uri), tracking_uri, name)


def _experiment_id(mlflow_client, tracking_uri: str, name: str) -> str:
    experiment = mlflow_client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return mlflow_client.create_experiment(name, artifact_location=artifact_location(tracking_uri, name),
                                                   tags=dict([EXPERIMENT_KIND]))
        except Exception:  # noqa: BLE001 - created meanwhile by a concurrent trial: read it below
            experiment = mlflow_client.get_experiment_by_name(name)
    if RAY_COPY in (experiment.artifact_location or ""):
        sys.stderr.write(f"warning: experiment {name!r} keeps its artifacts in Ray's temporary copy of the repository "
                         f"({experiment.artifact_location}; made by an older version): they go when Ray removes its "
                         f"session files; copy them elsewhere, and use a new --experiment for new runs\n")
    if experiment.lifecycle_stage == "deleted":
        mlflow_client.restore_experiment(experiment.experiment_id)
    if EXPERIMENT_KIND[0] not in experiment.tags:  # made by an older version or by hand
        mlflow_client.set_experiment_tag(experiment.experiment_id, *EXPERIMENT_KIND)
    return experiment.experiment_id


def start_run(tracking_uri: str, experiment: str, run_name: str, params: dict[str, str], tags: dict[str, str],
              config_yaml: str, parent_run_id: str | None = None, source: str = "platform.train") -> str:
    """Create a run with its params, tags and ``config.yaml``; returns the run id.  ``source``
    (the command) and the commit are MLflow's source tags, what its runs table's Source column shows."""
    tags = {"mlflow.user": launching_user(), **tags}  # taken here: the relay may run it elsewhere
    return on_client(client(tracking_uri), _start_run, experiment, tracking_uri, run_name, params, tags, config_yaml,
                     parent_run_id, source)


def _start_run(mlflow_client, experiment: str, tracking_uri: str, run_name: str, params: dict[str, str],
               tags: dict[str, str], config_yaml: str, parent_run_id: str | None, source: str) -> str:
    from mlflow.entities import Param, RunTag

    params, tags = redact_values(params), redact_values(tags)
    all_tags = {"mlflow.source.type": "LOCAL", "mlflow.source.name": source, **tags}
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    if params.get("git_commit", "unknown") != "unknown":  # the commit column of MLflow's runs table
        all_tags["mlflow.source.git.commit"] = params["git_commit"]
    experiment_id = _experiment_id(mlflow_client, tracking_uri, experiment)
    run = mlflow_client.create_run(experiment_id, run_name=run_name, tags=all_tags)
    run_id = run.info.run_id
    items = [Param(key, value) for key, value in params.items()]
    for start in range(0, len(items), 100):
        mlflow_client.log_batch(run_id, params=items[start:start + 100])
    mlflow_client.log_batch(run_id, tags=[RunTag("mlflow.note.content", f"resolved config:\n```\n{config_yaml}```")])
    upload_bytes(mlflow_client, run_id, "config.yaml", config_yaml.encode("utf-8"), None)
    return run_id


def find_run(tracking_uri: str, experiment: str, tags: dict[str, str]) -> str | None:
    """The id of *the* run of ``experiment`` carrying all ``tags`` (None if there is none).

    Callers pass tags that identify one run (a trial by its parent run and trial id, a sweep's
    parent or a named training by name); two matches are an error, never a guess."""
    return on_client(client(tracking_uri), _find_run, experiment, tags)


def _find_run(mlflow_client, experiment: str, tags: dict[str, str]) -> str | None:
    found = mlflow_client.get_experiment_by_name(experiment)
    if found is None:
        return None
    query = " and ".join(f"tags.`{key}` = {_quoted(value)}" for key, value in tags.items())
    runs = mlflow_client.search_runs([found.experiment_id], filter_string=query, max_results=2)
    if len(runs) > 1:
        ids = ", ".join(run.info.run_id for run in runs)
        raise UserError(f"several MLflow runs of experiment {experiment!r} carry {tags} ({ids}); "
                        f"delete the extra one or use another name")
    return runs[0].info.run_id if runs else None


def running_children(tracking_uri: str, experiment: str, parent_run_id: str) -> list:
    """The runs nested under ``parent_run_id`` that are still RUNNING, every page of them."""
    return on_client(client(tracking_uri), _running_children, experiment, parent_run_id)


def _running_children(mlflow_client, experiment: str, parent_run_id: str) -> list:
    found = mlflow_client.get_experiment_by_name(experiment)
    query = f"tags.`mlflow.parentRunId` = {_quoted(parent_run_id)} and attributes.status = 'RUNNING'"
    children, token = [], None
    while found is not None:
        page = mlflow_client.search_runs([found.experiment_id], filter_string=query, page_token=token)
        children += page
        token = page.token
        if not token:
            break
    return children


def _quoted(value: str) -> str:
    """``value`` as a string literal of MLflow's search syntax (which has no escapes)."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise UserError(f"the name {value!r} has both kinds of quotes; MLflow cannot search for it: choose another")


def link_models(tracking_uri: str, from_run: str, to_run: str) -> int:
    """Link ``from_run``'s logged models to ``to_run`` as its outputs too (a sweep's parent gets
    its best trial's model, for the API: MLflow 3.17's UI shows a model only on the row of the
    run that logged it), each once (a resumed sweep links them again); returns how many."""
    from mlflow.entities import LoggedModelOutput


    mlflow_client = client(tracking_uri)
    outputs = mlflow_client.get_run(from_run).outputs
    models = [LoggedModelOutput(output.model_id, output.step) for output in (outputs.model_outputs if outputs else [])]
    add_outputs(mlflow_client, to_run, models)
    return len(models)


def reopen(tracking_uri: str, run_id: str, tags: dict[str, str]) -> None:
    """A finished run RUNNING again (``--continue``), with ``tags`` saying why."""
    on_client(client(tracking_uri), _reopen, run_id, tags)


def _reopen(mlflow_client, run_id: str, tags: dict[str, str]) -> None:
    _tag_run(mlflow_client, run_id, tags)
    mlflow_client.update_run(run_id, status="RUNNING")


def log_model_input(tracking_uri: str, run_id: str, model_id: str) -> None:
    """A logged model the run started from (``--init-from``), as the run's model input."""
    on_client(client(tracking_uri), _log_model_input, run_id, model_id)


def _log_model_input(mlflow_client, run_id: str, model_id: str) -> None:
    from mlflow.entities import LoggedModelInput

    mlflow_client.log_inputs(run_id, models=[LoggedModelInput(model_id)])


def status(tracking_uri: str, run_id: str) -> str:
    """RUNNING, FINISHED, FAILED or KILLED."""
    return on_client(client(tracking_uri), run_status, run_id)


def end_run(tracking_uri: str, run_id: str, error: BaseException | str | None = None,
            only_if_running: bool = False, spool: str | None = None) -> None:
    """Close the run FINISHED, or FAILED with the error as a tag, after the records it kept in
    ``spool`` (a ``tracking.spool`` root) are in; the ends kept there are superseded by this one.

    ``only_if_running`` leaves a run that someone else (the sweep driver) closed already as it
    is: a trial that Tune stopped may see its training interrupted after the driver marked its
    run FINISHED, and that interruption is not a failure."""
    mlflow_client = client(tracking_uri)
    if spool is not None and Spool(spool).root.child(run_id).is_dir():
        Spool(spool).replay(mlflow_client, run_id, ends=False)
    on_client(mlflow_client, terminate, run_id, message_of(error), only_if_running)


def tag_run(tracking_uri: str, run_id: str, tags: dict[str, str]) -> None:
    on_client(client(tracking_uri), _tag_run, run_id, tags)


def _tag_run(mlflow_client, run_id: str, tags: dict[str, str]) -> None:
    for key, value in redact_values(tags).items():
        mlflow_client.set_tag(run_id, key, value)


def run_param(tracking_uri: str, run_id: str, key: str) -> str | None:
    """One param of a run (None where it has none)."""
    return run_params_of(tracking_uri, run_id).get(key)


def run_params_of(tracking_uri: str, run_id: str) -> dict[str, str]:
    """Every param of a run."""
    return on_client(client(tracking_uri), _run_params_of, run_id)


def _run_params_of(mlflow_client, run_id: str) -> dict[str, str]:
    return dict(mlflow_client.get_run(run_id).data.params)
