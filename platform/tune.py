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
seeds and scored on test (``launch.confirm``).  The sweep is an MLflow parent run; every trial
and confirmation run a child run.  Run from the repository root.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from platform import flags
from platform.errors import run_cli
from platform.flags import DATA_HELP, TRACKING_URI_HELP, no_password
from platform.launch.cluster import default_storage_path
from platform.launch.searcher import SCHEDULERS, SEARCHERS
from platform.launch.tuning import SweepRequest, tune


def build_parser() -> argparse.ArgumentParser:
    from search_spaces import SPACES

    parser = flags.ArgumentParser(prog="python -m platform.tune", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--space", required=True, help=f"search space: {', '.join(SPACES)}, or a space .yaml file")
    parser.add_argument("--data", default="demo", help=DATA_HELP)
    parser.add_argument("--num-trials", "--num-samples", dest="num_trials", type=int,
                        help="configs to sample (default 6; smoke 3; grid: the whole grid); each is trained "
                             "--seeds-per-config times")
    parser.add_argument("--max-epochs", type=int,
                        help="epochs of a trial that the scheduler never stops (default 4; smoke 2)")
    parser.add_argument("--search", choices=SEARCHERS,
                        help="Optuna sampler (default tpe, or the space's search.searcher)")
    parser.add_argument("--scheduler", choices=SCHEDULERS,
                        help="trial scheduler (default asha, or the space's search.scheduler); none trains every "
                             "trial to the end")
    parser.add_argument("--grace-period", type=int, help="epochs before the scheduler may stop a trial (default 1)")
    parser.add_argument("--reduction-factor", type=int,
                        help="asha/hyperband: 1 in this many trials goes on per rung (default 2)")
    parser.add_argument("--min-samples", type=int, help="median: trials needed at an epoch to compare with (default 3)")
    parser.add_argument("--objective", action="append", default=[], metavar="METRIC:MODE",
                        help="an objective (repeatable; several make a multi-objective sweep), e.g. "
                             "--objective dev_bleu:max --objective num_parameters:min")
    parser.add_argument("--seeds-per-config", type=int, default=1,
                        help="train each sampled config with this many seeds (Optuna gets their mean; default 1)")
    parser.add_argument("--time-budget", type=parse_duration, metavar="DURATION",
                        help="wall clock for the search (e.g. 90m, 2h, 3600): then it ends cleanly with its summary")
    parser.add_argument("--confirm", type=int, default=0, metavar="K",
                        help="after the search, train the K best configs and the space's baseline again with "
                             "--confirm-seeds seeds each, score them on test, and test them against the baseline")
    parser.add_argument("--confirm-seeds", type=int, default=3, help="seeds per confirmed config (default 3)")
    parser.add_argument("--register-model", metavar="NAME",
                        help="register the best trial's model (with --confirm: the confirmation's winner, the seed "
                             "run with its best dev score) as a new version of NAME, with the alias 'champion'")
    parser.add_argument("--study-storage", metavar="URL",
                        help="the Optuna study's RDB storage (a SQLAlchemy URL; default $NMT_STUDY_STORAGE, else "
                             "sqlite:///runs/NAME/optuna.db)")
    parser.add_argument("--size", choices=["sweep", "cpu", "paper"], default="sweep",
                        help="trial defaults: sweep (small models, 200-step epochs; the default), cpu, paper")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a config value for every trial, e.g. --set model.d_model=256 (repeatable)")
    parser.add_argument("--workers-per-trial", type=int, default=1, help="DDP workers of each trial (default 1)")
    parser.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs per worker (default 1)")
    parser.add_argument("--gpus-per-worker", type=float,
                        help="GPUs per worker (default: none on a cluster without GPUs; else 1 at --size paper and "
                             "1/8 for the smaller sizes, eight trials sharing a GPU)")
    parser.add_argument("--max-concurrent", type=int, help="at most this many trials at once (default: what fits)")
    parser.add_argument("--name", help="sweep name; with --resume, the sweep to continue")
    parser.add_argument("--resume", action="store_true",
                        help="continue the interrupted sweep --name (its latest experiment, an extension included)")
    parser.add_argument("--extend", metavar="SWEEP",
                        help="add --num-trials trials to the finished (or interrupted) sweep SWEEP: the same "
                             "study, parent run and searcher and scheduler as they ended; its summary covers all")
    parser.add_argument("--warm-start-from", metavar="SWEEP",
                        help="start this new sweep's searcher with the finished trials of sweep SWEEP (its "
                             "study), where their parameters fit this space")
    parser.add_argument("--seed", type=int, default=1, help="the Optuna sampler's seed (default 1)")
    parser.add_argument("--smoke", action="store_true", help="3 tiny trials of 2 short epochs, for a quick check")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the resolved space and one sampled config, then exit")
    parser.add_argument("--experiment", default="syntax-nmt", help="MLflow experiment (default syntax-nmt)")
    parser.add_argument("--tracking-uri", help=TRACKING_URI_HELP)
    parser.add_argument("--storage-path", default=default_storage_path(),
                        help="Ray Tune/Train storage: a directory or s3://... (shared storage on a cluster; default "
                             "$NMT_STORAGE_PATH, else runs)")
    parser.add_argument("--address", help="Ray cluster address (default: start a local one, or 'auto')")
    parser.add_argument("--verbose", action="store_true",
                        help="also show Ray's own console (its tables, warnings and workers' lines); "
                             "by default they go to console.log in the sweep's directory")
    return parser


def parse_duration(text: str) -> float:
    """``90m``, ``2h``, ``45s``, ``1.5h`` or plain seconds → seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:
        seconds = float(number) * unit
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90m, 2h, 3600)") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"a time budget must be positive, not {text!r}")
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    launched_at = time.time()
    args = build_parser().parse_args(argv)
    no_password("--study-storage", args.study_storage, "set NMT_STUDY_STORAGE, or put it in ~/.pgpass")
    no_password("--tracking-uri", args.tracking_uri, "set MLFLOW_TRACKING_URI, or put it in ~/.pgpass")
    return tune(SweepRequest(**vars(args), launched_at=launched_at))


if __name__ == "__main__":
    run_cli(main)
