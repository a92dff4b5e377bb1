"""Warm start: a new run that starts from the weights of an earlier one (``--init-from``).

The source is an MLflow run id (its best checkpoint), a registered model
(``models:/NAME/VERSION`` or ``models:/NAME@champion``: the best checkpoint of the run that
logged it), a checkpoint URI that MLflow can download (``runs:/RUN/best/checkpoint.pt``,
``s3://...``) or a local checkpoint file.  The driver loads it once and checks it before any
work: the dataset must be encoded with the source's own subword models (else every id would
mean another piece), and the weights must fit the new run's model config.  The weights (and,
with ``keep_optimizer``, the optimiser and schedule) reach the workers with the run's loop
config; a worker that resumes from its own checkpoint ignores them.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models import build_model
from platform.data.dataset import read_meta, read_subword_model
from platform.errors import UserError
from platform.tracking.run_files import fetch_checkpoint
from platform.tracking.store import client, on_client
from platform.training.checkpoint import IncompatibleCheckpoint, config_from_checkpoint, load_checkpoint, load_weights
from platform.training.config import TrainConfig

RUN_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True)
class InitFrom:
    source: str  # as the user gave it
    weights: dict
    optimizer: dict | None  # with the scheduler: only when asked to continue them
    scheduler: dict | None
    run_id: str | None  # the MLflow run the weights come from, where known
    model_id: str | None  # its logged MLflow model, where known (the new run's parent model)

    def loop_config(self) -> dict[str, Any]:
        """What the workers need: the tensors, and where they come from (for messages)."""
        return {"source": self.source, "weights": self.weights, "optimizer": self.optimizer,
                "scheduler": self.scheduler}

    def tags(self) -> dict[str, str]:
        tags = {"init_from": self.source}
        if self.run_id:
            tags["init_from_run"] = self.run_id
        return tags


def load_init_from(source: str, tracking_uri: str, dataset: str, config: TrainConfig,
                    keep_optimizer: bool = False) -> InitFrom:
    """Fetch and check ``source`` against ``dataset`` (a prepared dataset's location) and ``config``."""
    with tempfile.TemporaryDirectory(prefix="nmt-init-") as scratch:
        path, run_id, model_id = _fetch(source, tracking_uri, Path(scratch))
        try:
            state = load_checkpoint(path)
        except Exception as error:  # noqa: BLE001 - said in one line
            raise UserError(f"--init-from {source}: not a checkpoint this code can load "
                            f"({' '.join(str(error).split())[:200]})") from None
    check_fits(state, source, dataset, config)
    return InitFrom(source, state["model"], state["optimizer"] if keep_optimizer else None,
                     state["scheduler"] if keep_optimizer else None, run_id, model_id)


def check_fits(state: dict, source: str, dataset: str, config: TrainConfig) -> None:
    """The source's vocabularies are the dataset's, and its weights fit ``config``'s model."""

    for side in ("src", "tgt"):
        own = bytes(state["subword_models"][side].numpy().tobytes())
        if own != read_subword_model(dataset, side):
            sizes = state["dataset_meta"]["vocab_size"][side], read_meta(dataset)["vocab_size"][side]
            raise IncompatibleCheckpoint(
                f"--init-from {source}: its {side} subword model is not the one {dataset} was encoded with "
                f"({sizes[0]} vs {sizes[1]} pieces), so its token ids would mean other pieces; prepare the data "
                f"with `platform.prepare --subwords-from` the source's dataset")
    config_from_checkpoint(state)  # its own config loads (a clear error otherwise)
    vocab = state["dataset_meta"]["vocab_size"]
    load_weights(build_model(config.model, vocab["src"], vocab["tgt"]), state["model"], f"--init-from {source}")


def _fetch(source: str, tracking_uri: str, scratch: Path) -> tuple[Path, str | None, str | None]:
    """The checkpoint file of ``source``, and the MLflow run and logged model it comes from."""

    if source.startswith("models:/"):
        run_id, model_id = _registered(source, tracking_uri)
        return fetch_checkpoint(run_id, tracking_uri, scratch), run_id, model_id
    if RUN_ID.match(source) and not Path(source).exists():
        return fetch_checkpoint(source, tracking_uri, scratch), source, _logged_model(source, tracking_uri)
    if "://" in source or source.startswith("runs:/"):
        import mlflow.artifacts

        try:
            path = mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=str(scratch),
                                                       tracking_uri=tracking_uri)
        except Exception as error:  # noqa: BLE001 - said in one line
            said = " ".join(str(error).split())[:200]
            raise UserError(f"--init-from {source}: cannot download it ({said})") from None
        run_id = source.split("/")[1] if source.startswith("runs:/") else None
        return Path(path), run_id, None
    if not Path(source).is_file():
        raise UserError(f"--init-from {source}: not a run id, models:/NAME/VERSION, checkpoint URI or file")
    return Path(source), None, None


def _registered(source: str, tracking_uri: str) -> tuple[str, str | None]:
    """``models:/NAME/VERSION`` or ``models:/NAME@ALIAS`` → the run that logged it and its
    logged model id."""

    name, at, alias = source[len("models:/"):].partition("@")
    parts = [name, alias] if at else name.split("/")
    if len(parts) != 2 or not all(parts) or "/" in alias:
        raise UserError(f"--init-from {source}: expected models:/NAME/VERSION or models:/NAME@ALIAS")
    try:
        run_id, model_id = on_client(client(tracking_uri), _version_of, *parts, by_alias=bool(at))
    except Exception as error:  # noqa: BLE001 - said in one line
        raise UserError(f"--init-from {source}: no such registered model version in {tracking_uri} "
                        f"({' '.join(str(error).split())[:200]})") from None
    if not run_id:
        raise UserError(f"--init-from {source}: the model version names no run to take its checkpoint from")
    return run_id, model_id


def _version_of(mlflow_client, name: str, version_or_alias: str, by_alias: bool) -> tuple[str | None, str | None]:
    get = mlflow_client.get_model_version_by_alias if by_alias else mlflow_client.get_model_version
    version = get(name, version_or_alias)
    return version.run_id, version.model_id or version.tags.get("model_id")  # (registry.register's tag)


def _logged_model(run_id: str, tracking_uri: str) -> str | None:

    outputs = client(tracking_uri).get_run(run_id).outputs
    models = outputs.model_outputs if outputs else []
    return models[-1].model_id if models else None
