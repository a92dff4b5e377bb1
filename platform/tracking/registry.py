"""The MLflow model registry: a run's logged model registered as a new version of a named model,
tagged with what the run measured and how it was made, and pointed to by the alias ``champion``.

``platform.train``, ``platform.tune`` (its best trial, or its confirmation's winner) and
``platform.evaluate`` take ``--register-model NAME``; each calls ``register``.  The alias moves to
each new version; a user moves it back (or elsewhere) with MLflow's UI or
``MlflowClient().set_registered_model_alias(NAME, "champion", VERSION)``, and serves whatever it
points at with ``mlflow models serve -m models:/NAME@champion``.  ``platform.train --init-from
models:/NAME/VERSION`` (or ``@champion``) starts a new run from a registered version.
"""

from __future__ import annotations

from dataclasses import dataclass

from platform.errors import UserError
from platform.tracking.store import client, on_client

ALIAS = "champion"
RECORDED_TAGS = ("recipe", "model", "sweep", "trial_id", "stage", "train_name", "sacrebleu_signature",
                 "test_sacrebleu_signature")


@dataclass(frozen=True)
class Registered:
    name: str
    version: str
    run_id: str
    model_id: str

    @property
    def uri(self) -> str:
        return f"models:/{self.name}@{ALIAS}"

    def line(self) -> str:
        """What a command prints once it registered the model."""
        return (f"registered model {self.name!r} version {self.version} (run {self.run_id}), alias {ALIAS!r}: "
                f"mlflow models serve -m {self.uri}")


def check_model_name(name: str) -> str:
    """A registered model's name as given, or a one-line error before any work: not empty, and
    without ``/``, ``@`` or ``:``, which ``models:/NAME/VERSION`` and ``models:/NAME@ALIAS`` would misread."""
    if not name.strip() or any(mark in name for mark in "/@:") or name != name.strip():
        raise UserError(f"--register-model {name!r}: a model name is not empty, has no surrounding spaces "
                        "and none of / @ :")
    return name


def register(tracking_uri: str, run_id: str, name: str, source: str) -> Registered:
    """Register the logged model of ``run_id`` as a new version of ``name`` (created if new), its
    tags the run's metrics (``metric.NAME``), recipe, model, git commit, dataset and ``source``
    (the command that registered it), and point the alias ``champion`` at it.  A run without a
    logged model (it never validated, or MLflow could not save it) is a one-line error."""
    check_model_name(name)
    version, model_id = on_client(client(tracking_uri), _register, run_id, name, source)
    return Registered(name, version, run_id, model_id)


def _register(mlflow_client, run_id: str, name: str, source: str) -> tuple[str, str]:
    from mlflow.exceptions import MlflowException

    run = mlflow_client.get_run(run_id)
    outputs = run.outputs.model_outputs if run.outputs else []
    if not outputs:
        reason = run.data.tags.get("mlflow_model_error", "it logged no MLflow model")
        raise UserError(f"--register-model {name}: run {run_id} has no model to register ({reason})")
    model_id = max(outputs, key=lambda output: output.step).model_id  # the latest best, for a run linked to several
    try:
        mlflow_client.create_registered_model(name, description="a syntax-aware NMT model (platform.train)")
    except MlflowException as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    # the logged model's own artifact location as the source (a models:/ source would be resolved
    # against the process's default tracking URI, not this client's)
    source_uri = mlflow_client.get_logged_model(model_id).artifact_location
    tags = {**version_tags(run, source), "model_id": model_id}  # a SQL registry keeps no model_id of its own
    version = mlflow_client.create_model_version(name, source_uri, run_id=run_id, tags=tags, model_id=model_id)
    mlflow_client.set_registered_model_alias(name, ALIAS, version.version)
    return str(version.version), model_id


def version_tags(run, source: str) -> dict[str, str]:
    """A version's tags: the run's metrics, what made it, and where it came from."""
    tags = {f"metric.{key}": f"{value:.6g}" for key, value in sorted(run.data.metrics.items())}
    tags.update({key: run.data.tags[key] for key in RECORDED_TAGS if key in run.data.tags})
    params = run.data.params
    tags.update({key: params[key] for key in ("git_commit", "data", "dataset_sha256") if key in params})
    tags.update({"run_id": run.info.run_id, "registered_by": source})
    return tags
