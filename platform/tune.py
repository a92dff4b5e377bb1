"""``python -m platform.tune``: a hyper-parameter sweep with Ray Tune + Optuna + ASHA, tracked in MLflow.

    python -m platform.tune --space dbsa                       # demo corpus, CPU-sized sweep
    python -m platform.tune --space deprel --data data/ja-en --num-trials 32 --workers-per-trial 2 --gpus-per-worker 1
    python -m platform.tune --space dbsa --name my-sweep --resume
    python -m platform.tune --space dbsa --extend my-sweep --num-trials 16
    python -m platform.tune --space dbsa --warm-start-from my-sweep --num-trials 32 --size paper
    python -m platform.tune --space hier --dry-run
    python -m platform.tune --space dbsa --search random --scheduler none --time-budget 2h --confirm 2
    python -m platform.tune --space papers --search grid --seeds-per-config 3

Each trial is a Tune function trainable that builds its own Ray Train ``TorchTrainer`` (the
Train V2 pattern) and forwards rank 0's metrics through Ray's ``TuneReportCallback`` (the last
one once the trainer has shut down, so it withdraws its request to the autoscaler); its trainer run
is named after the trial id, so a retried trial resumes its own checkpoints.  ``OptunaSearch``
(``--search``: TPE by default, seeded) samples the space, the space's first points (the papers'
settings) first, its study live in an RDB storage (``optuna-dashboard`` opens it while the sweep
runs); ``--scheduler`` (ASHA by default) stops weak trials per epoch, and those are told to
Optuna as PRUNED (Ray would tell them COMPLETE with their early value, which biases TPE).  With
``--confirm K`` the K best configs and the space's baseline are trained again with several
seeds and scored on test (``sweeps.confirm``).  The sweep is an MLflow parent run; every trial
and confirmation run a child run.  Run from the repository root.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from platform import flags
from platform.errors import run_cli
from platform.flags import no_password
from platform.sweeps.tuning import SweepRequest, tune


def build_parser() -> argparse.ArgumentParser:
    parser = flags.ArgumentParser(prog="python -m platform.tune", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add_flags(parser, SweepRequest)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    launched_at = time.time()
    args = build_parser().parse_args(argv)
    no_password("--study-storage", args.study_storage, "set NMT_STUDY_STORAGE, or put it in ~/.pgpass")
    no_password("--tracking-uri", args.tracking_uri, "set MLFLOW_TRACKING_URI, or put it in ~/.pgpass")
    return tune(SweepRequest(**vars(args), launched_at=launched_at))


if __name__ == "__main__":
    run_cli(main)
