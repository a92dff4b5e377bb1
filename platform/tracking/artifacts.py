"""Uploading artifacts: every file the platform logs to MLflow goes through ``upload_bytes``
(also the relay actor's uploads), so where and how artifacts are written is decided here."""

from __future__ import annotations

import tempfile
from pathlib import Path


def upload_bytes(mlflow_client, run_id: str, name: str, data: bytes, directory: str | None) -> None:
    """Log ``data`` as the artifact ``directory/name`` of ``run_id``."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / name
        path.write_bytes(data)
        mlflow_client.log_artifact(run_id, str(path), directory)


def upload_model_files(mlflow_client, model_id: str, files: dict[str, bytes]) -> None:
    """Upload an MLflow model directory (relative path → bytes) as the files of the logged model
    ``model_id`` (``tracking.model``)."""
    with tempfile.TemporaryDirectory() as scratch:
        for name, data in files.items():
            path = Path(scratch) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        mlflow_client.log_model_artifacts(model_id, scratch)


def files_of(directory: Path) -> dict[str, bytes]:
    """A saved directory (an MLflow model) as relative path → bytes (what crosses to the relay)."""
    return {str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts}


# Artifact stores every node writes to with its own credentials (the workers' role on S3): a
# relayed run's files go there straight from the node that made them, never through the relay.
DIRECT_SCHEMES = ("s3", "gs", "wasbs", "abfss")


def is_direct(artifact_uri: str) -> bool:
    """Whether ``artifact_uri`` is an object store that any node writes to itself (not the
    tracking server's proxy, ``mlflow-artifacts:``, and not a file on the head's disk)."""
    return artifact_uri.split(":", 1)[0].lower() in DIRECT_SCHEMES


def upload_direct(artifact_uri: str, local_path: Path, artifact_path: str | None = None) -> None:
    """Upload a file, or a directory's files, to ``artifact_uri`` (a run's or a logged model's
    artifact location) from this node, with MLflow's own artifact repository for that store."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    repository = get_artifact_repository(artifact_uri)
    if Path(local_path).is_dir():
        repository.log_artifacts(str(local_path), artifact_path)
    else:
        repository.log_artifact(str(local_path), artifact_path)
