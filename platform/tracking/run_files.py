"""A training run's files in MLflow: its best checkpoint and its last checkpoints' weights fetched, and
the test results of an evaluation logged back onto it."""

from __future__ import annotations

from pathlib import Path

from platform.errors import UserError
from platform.tracking.logger import RunLogger
from platform.tracking.store import client
from platform.training.averaging import kept_files
from platform.training.checkpoint import CHECKPOINT_FILE
from platform.training.retention import LAST, LEGACY_LAST


def fetch_checkpoint(run_id: str, tracking_uri: str, directory: str | Path) -> Path:
    """Download the best checkpoint of an MLflow run into ``directory``."""

    try:
        path = client(tracking_uri).download_artifacts(run_id, f"best/{CHECKPOINT_FILE}", str(directory))
    except Exception as error:  # noqa: BLE001 - an unknown run, no artifact, an unreachable server: said below
        raise UserError(f"cannot fetch the best checkpoint of run {run_id} from {tracking_uri}: {error}") from None
    return Path(path)


def fetch_kept(run_id: str, tracking_uri: str, directory: str | Path) -> Path:
    """Download the last checkpoints' weights the run kept (``training.retention.LAST``; a
    run from before update checkpoints: its ``LEGACY_LAST`` epochs) into ``directory``; returns
    their directory (``directory`` itself, empty, where it kept none)."""

    for kind in (LAST, LEGACY_LAST):
        try:
            fetched = Path(client(tracking_uri).download_artifacts(run_id, kind, str(directory)))
        except Exception:  # noqa: BLE001 - no such artifact: the run kept none there
            continue
        if kept_files(fetched):
            return fetched
    return Path(directory)


def log_test_results(tracking_uri: str, run_id: str, result, files: list[Path], test_name: str,
                     kind: str = "test") -> None:
    """The test metrics, sacrebleu signature and output files (``result``: a
    ``training.evaluate.Evaluation``) onto the run that was evaluated (``kind``: ``test``, or
    ``test_avgN`` for averaged weights)."""

    logger = RunLogger(tracking_uri, run_id, reopen=False)
    logger.metrics(result.metrics, step=0)
    logger.tag(f"{kind}_sacrebleu_signature", result.signature)
    for path in files:
        logger.artifact(path, f"{kind}/{test_name}")
    logger.close()  # delivered (or named lost) before the command goes on
