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
