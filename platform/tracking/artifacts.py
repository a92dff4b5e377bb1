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


def log_file(tracking_uri: str, run_id: str, path: str | Path, directory: str | None = None) -> None:
    """Log a local file as ``directory/<its name>``."""
    from platform.tracking.store import client

    upload_bytes(client(tracking_uri), run_id, Path(path).name, Path(path).read_bytes(), directory)


def log_text(tracking_uri: str, run_id: str, text: str, artifact_file: str) -> None:
    """Log ``text`` as the artifact ``artifact_file`` (``dir/name.ext``)."""
    from platform.tracking.store import client

    parent = str(Path(artifact_file).parent)
    upload_bytes(client(tracking_uri), run_id, Path(artifact_file).name, text.encode("utf-8"),
                 None if parent == "." else parent)
