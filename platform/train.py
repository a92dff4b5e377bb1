"""``python -m platform.train``: one model trained with Ray Train (DDP) and tracked in MLflow.

    python -m platform.train --model dbsa                      # demo corpus, CPU-sized model
    python -m platform.train --model transformer --smoke       # tiny model, a few steps
    python -m platform.train --model dbsa --max-updates 300 --log-every 50 --validate-every 100
    python -m platform.train --model deprel --data data/ja-en --set model.l_clip=3 --workers 2

A Ray Train V2 ``TorchTrainer`` runs ``--workers`` DDP workers (gloo on CPU, nccl with GPUs);
each reads its shard of the training data; rank 0 writes a progress line and the train
metrics to MLflow every ``--log-every`` updates, evaluates on the dev set every epoch (or
every ``--validate-every`` updates) and writes a checkpoint through Ray.  A failed worker group restarts
from the last checkpoint (``--max-failures``).  Run from the repository root.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from platform import flags
from platform.errors import run_cli
from platform.flags import no_password
from platform.launch.training_run import TrainRequest, train
from platform.training import recipes


def build_parser() -> argparse.ArgumentParser:
    parser = flags.ArgumentParser(prog="python -m platform.train", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  epilog="recipes (each paper's table rows, platform/training/recipes.py):\n"
                                         + recipes.describe())
    flags.add_flags(parser, TrainRequest)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    started_at = time.time()
    args = build_parser().parse_args(argv)
    no_password("--tracking-uri", args.tracking_uri, "set MLFLOW_TRACKING_URI, or put it in ~/.pgpass")
    return train(TrainRequest(**vars(args), started_at=started_at))


if __name__ == "__main__":
    run_cli(main)
