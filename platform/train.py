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

from models import MODELS
from platform import flags
from platform.errors import run_cli
from platform.flags import DATA_HELP, TRACKING_URI_HELP, no_password
from platform.launch.cluster import default_storage_path
from platform.launch.training_run import TrainRequest, train
from platform.training import recipes


def build_parser() -> argparse.ArgumentParser:
    parser = flags.ArgumentParser(prog="python -m platform.train", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  epilog="recipes (each paper's table rows, platform/training/recipes.py):\n"
                                         + recipes.describe())
    parser.add_argument("--model", choices=list(MODELS), help="the architecture to train (or give --recipe)")
    parser.add_argument("--recipe", choices=list(recipes.RECIPES), metavar="RECIPE",
                        help="a paper's configuration of a table row (sets the model; default: the model's own "
                             "paper row); one of: " + ", ".join(recipes.RECIPES))
    parser.add_argument("--data", default="demo", help=DATA_HELP)
    parser.add_argument("--config", metavar="YAML", help="a config file (sections model, batching, optim, eval, ...)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config value, e.g. --set model.p_enc=3 --set optim.lr=5e-4 (repeatable)")
    parser.add_argument("--size", choices=["cpu", "paper"], default="cpu",
                        help="model size defaults: cpu (small, the default) or paper (6+6 layers, d 512)")
    parser.add_argument("--workers", type=int, default=1, help="DDP workers (default 1)")
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, help="GPUs per worker (0 = CPU with gloo)")
    parser.add_argument("--cpus-per-worker", type=float, default=0.0,
                        help="CPUs per worker, also its torch threads (default: this machine's cores / workers)")
    parser.add_argument("--max-epochs", type=int,
                        help="number of epochs (default: the size preset's, 3 for cpu; smoke 2)")
    parser.add_argument("--max-updates", type=int,
                        help="stop after this many updates (without --max-epochs, the only limit)")
    parser.add_argument("--log-every", type=int, metavar="N",
                        help="a progress line and train metrics in MLflow every N updates (default 100; 0: none)")
    parser.add_argument("--validate-every", type=int, metavar="N",
                        help="validate on dev and checkpoint every N updates (default: at each epoch's end)")
    parser.add_argument("--save-every", type=int, metavar="N",
                        help="also checkpoint every N updates, without validating (default: at validations only)")
    parser.add_argument("--average-last", type=int, metavar="N",
                        help="keep the weights of the last N checkpoints (validations and --save-every ones), "
                             "for evaluate/translate --average-last (default 5; 0: none)")
    parser.add_argument("--keep-best", type=int, metavar="N",
                        help="also keep the weights of the N best validations (default 0: the best checkpoint only)")
    parser.add_argument("--smoke", action="store_true", help="a tiny model and a few steps, for a quick check")
    parser.add_argument("--share-all-embeddings", action="store_true",
                        help="one embedding matrix for the source, the target and the output layer (Vaswani et al. "
                             "2017, §3.4; the Transformer family); the dataset needs prepare --joint-vocab")
    parser.add_argument("--experiment", default="syntax-nmt", help="MLflow experiment name (default syntax-nmt)")
    parser.add_argument("--tracking-uri", help=TRACKING_URI_HELP)
    parser.add_argument("--name", help="run name; rerunning with the same name resumes its Ray checkpoints")
    parser.add_argument("--storage-path", default=default_storage_path(),
                        help="where Ray keeps checkpoints: a directory or s3://... (shared storage on a cluster; "
                             "default $NMT_STORAGE_PATH, else runs)")
    parser.add_argument("--max-failures", type=int, default=2, help="restarts of a failed worker group (default 2)")
    parser.add_argument("--address", help="Ray cluster address (default: start a local one, or 'auto')")
    parser.add_argument("--init-from", metavar="SOURCE",
                        help="start from these weights in a new run: an MLflow run id (its best checkpoint), "
                             "models:/NAME/VERSION or models:/NAME@champion, a checkpoint URI (runs:/..., "
                             "s3://...) or a checkpoint file")
    parser.add_argument("--init-optimizer", action="store_true",
                        help="with --init-from: continue its optimiser and learning-rate schedule too (default: fresh)")
    parser.add_argument("--continue", dest="continue_run", action="store_true",
                        help="with --name of a finished run: train it on, in the same run, to the new "
                             "--max-epochs/--max-updates")
    parser.add_argument("--register-model", metavar="NAME",
                        help="register the run's best model as a new version of NAME in MLflow's model registry, "
                             "with the alias 'champion'")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    started_at = time.time()
    args = build_parser().parse_args(argv)
    no_password("--tracking-uri", args.tracking_uri, "set MLFLOW_TRACKING_URI, or put it in ~/.pgpass")
    return train(TrainRequest(**vars(args), started_at=started_at))


if __name__ == "__main__":
    run_cli(main)
