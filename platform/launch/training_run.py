"""One training run, as ``python -m platform.train`` asks for it: the flags as a typed request
(``TrainRequest``) and ``train``: the config resolved (``--print-config`` stops here), a named
run that finished already left alone or continued (``--continue``), Ray started and the worker
group checked, the storage every node reaches, then the dataset (where they read it), the warm
start (``--init-from``), then ``driver.run``."""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass, field

from models import MODELS
from platform import config_io
from platform.errors import UserError
from platform.flags import DATA_HELP, TRACKING_URI_HELP, flag
from platform.launch import reach
from platform.launch.cluster import (
    check_worker_group,
    default_cpus_per_worker,
    default_storage_path,
    start_ray,
    storage_uri,
)
from platform.launch.driver import Job, run
from platform.launch.init_from import load_init_from
from platform.tracking import runs
from platform.tracking.registry import check_model_name, register
from platform.tracking.relay import held_relay
from platform.tracking.spool import replay_all
from platform.tracking.store import resolve_tracking_uri
from platform.training import recipes
from platform.training.config import TrainConfig, resolve_config


@dataclass(frozen=True, kw_only=True)
class TrainRequest:
    """What ``platform.train`` is asked: each field is its flag (``flags.flag``), declared here only."""

    model: str | None = flag("the architecture to train (or give --recipe)", default=None, choices=list(MODELS))
    recipe: str | None = flag("a paper's configuration of a table row (sets the model; default: the model's own "
                              "paper row); one of: " + ", ".join(recipes.RECIPES), default=None, metavar="RECIPE",
                              choices=list(recipes.RECIPES))
    data: str = flag(DATA_HELP, default="demo")
    config: str | None = flag("a config file (sections model, batching, optim, eval, ...)", default=None,
                              metavar="YAML")
    overrides: list[str] = flag("override one config value, e.g. --set model.p_enc=3 --set optim.lr=5e-4 "
                                "(repeatable)", default_factory=list, names=("--set",), metavar="KEY=VALUE")
    size: str = flag("model size defaults: cpu (small, the default) or paper (6+6 layers, d 512)", default="cpu",
                     choices=["cpu", "paper"])
    workers: int = flag("DDP workers (default 1)", default=1)
    gpus_per_worker: float = flag("GPUs per worker (0 = CPU with gloo)", default=0.0)
    cpus_per_worker: float = flag("CPUs per worker, also its torch threads (default: this machine's cores / workers)",
                                  default=0.0)
    max_epochs: int | None = flag("number of epochs (default: the size preset's, 3 for cpu; smoke 2)", default=None)
    max_updates: int | None = flag("stop after this many updates (without --max-epochs, the only limit)",
                                   default=None)
    log_every: int | None = flag("a progress line and train metrics in MLflow every N updates (default 100; 0: "
                                 "none)", default=None, metavar="N")
    validate_every: int | None = flag("validate on dev and checkpoint every N updates (default: at each epoch's "
                                      "end)", default=None, metavar="N")
    save_every: int | None = flag("also checkpoint every N updates, without validating (default: at validations "
                                  "only)", default=None, metavar="N")
    average_last: int | None = flag("keep the weights of the last N checkpoints (validations and --save-every "
                                    "ones), for evaluate/translate --average-last (default 5; 0: none)",
                                    default=None, metavar="N")
    keep_best: int | None = flag("also keep the weights of the N best validations (default 0: the best checkpoint "
                                 "only)", default=None, metavar="N")
    smoke: bool = flag("a tiny model and a few steps, for a quick check", default=False)
    share_all_embeddings: bool = flag("one embedding matrix for the source, the target and the output layer "
                                      "(Vaswani et al. 2017, §3.4; the Transformer family); the dataset needs "
                                      "prepare --joint-vocab", default=False)
    experiment: str = flag("MLflow experiment name (default syntax-nmt)", default="syntax-nmt")
    tracking_uri: str | None = flag(TRACKING_URI_HELP, default=None)
    name: str | None = flag("run name; rerunning with the same name resumes its Ray checkpoints", default=None)
    storage_path: str = flag("where Ray keeps checkpoints: a directory or s3://... (shared storage on a cluster; "
                             "default $NMT_STORAGE_PATH, else runs)", default_factory=default_storage_path)
    max_failures: int = flag("restarts of a failed worker group (default 2)", default=2)
    address: str | None = flag("Ray cluster address (default: start a local one, or 'auto')", default=None)
    init_from: str | None = flag("start from these weights in a new run: an MLflow run id (its best checkpoint), "
                                 "models:/NAME/VERSION or models:/NAME@champion, a checkpoint URI (runs:/..., "
                                 "s3://...) or a checkpoint file", default=None, metavar="SOURCE")
    init_optimizer: bool = flag("with --init-from: continue its optimiser and learning-rate schedule too "
                                "(default: fresh)", default=False)
    continue_run: bool = flag("with --name of a finished run: train it on, in the same run, to the new "
                              "--max-epochs/--max-updates", default=False, names=("--continue",))
    register_model: str | None = flag("register the run's best model as a new version of NAME in MLflow's model "
                                      "registry, with the alias 'champion'", default=None, metavar="NAME")
    print_config: bool = flag("print the resolved config and exit", default=False)
    started_at: float = field(default_factory=time.time)  # the command's start: the first epoch logs startup_s


def train(request: TrainRequest) -> int:
    """Train what ``request`` asks for (or print its config); returns the exit status."""
    model, recipe, config = resolved(request)
    if request.print_config:
        print(config_io.dump_yaml(config), end="")
        return 0
    tracking_uri = resolve_tracking_uri(request.tracking_uri)  # before any work: preparing the demo takes a minute
    named = {"train_name": request.name} if request.name else None  # a rerun with this --name continues its run
    if finished_already(request, tracking_uri, config):
        if request.register_model:
            done = runs.find_run(tracking_uri, request.experiment, named)
            print(register(tracking_uri, done, request.register_model, "platform.train").line())
        return 0
    start_ray(request.address)
    with held_relay(tracking_uri):  # the MLflow relay lives as long as the command
        return train_on_ray(request, model, recipe, config, tracking_uri, named)


def train_on_ray(request: TrainRequest, model: str, recipe: str, config: TrainConfig, tracking_uri: str,
                 named: dict[str, str] | None) -> int:
    """``train`` once Ray runs: the worker group checked, the dataset every node reaches, the run."""
    cpus = request.cpus_per_worker or default_cpus_per_worker(request.workers)
    check_worker_group(request.workers, cpus, request.gpus_per_worker, joined=request.address is not None)
    storage = storage_uri(request.storage_path)
    replay_all(storage, tracking_uri)  # what earlier runs kept during an outage (tracking.spool)
    shared = reach.storage_for_every_node(storage)  # before the demo corpus is prepared
    dataset = reach.dataset_ref(request.data, storage, shared, config)
    init = (load_init_from(request.init_from, tracking_uri, dataset.name, config, request.init_optimizer)
            if request.init_from else None)
    job = Job(dataset=dataset, workers=request.workers, init=init,
              gpus_per_worker=request.gpus_per_worker, cpus_per_worker=cpus, experiment=request.experiment,
              tracking_uri=tracking_uri, run_name=request.name or f"{model}-{uuid.uuid4().hex[:8]}",
              storage_path=storage, max_failures=request.max_failures, started_at=request.started_at)
    run_id = run(config, job, ray_address=request.address, tags={"recipe": recipe, **(named or {})}, reuse=named)
    print(f"finished: MLflow run {run_id} in experiment {job.experiment!r} ({job.tracking_uri})")
    if request.register_model:
        print(register(tracking_uri, run_id, request.register_model, "platform.train").line())
    return 0


def resolved(request: TrainRequest) -> tuple[str, str, TrainConfig]:
    """The model, its recipe and the run's config (``training.config.resolve_config``); flags
    that cannot go together are refused here, before anything starts."""
    if request.workers < 1:
        raise UserError("--workers must be at least 1")
    if not (request.model or request.recipe):
        raise UserError("give --model NAME or --recipe NAME (see --help)")
    if request.continue_run and not request.name:
        raise UserError("--continue needs the --name of the run to continue")
    if request.register_model is not None:
        check_model_name(request.register_model)
    if request.init_optimizer and not request.init_from:
        raise UserError("--init-optimizer goes with --init-from")
    model = request.model or recipes.get_recipe(request.recipe).model
    recipe, _ = recipes.recipe_for(model, request.recipe)
    if request.share_all_embeddings and model not in sharing_models():
        raise UserError(f"--share-all-embeddings: model {model} embeds each language on its own; "
                        f"the models that can share: {', '.join(sharing_models())}")
    flagged = {key: getattr(request, key) for key in ("log_every", "validate_every", "save_every", "average_last",
                                                      "keep_best") if getattr(request, key) is not None}
    if request.share_all_embeddings:
        flagged["model.share_all_embeddings"] = True
    config = resolve_config(model, "smoke" if request.smoke else request.size, recipe=recipe,
                            config_file=request.config, overrides=request.overrides, values=flagged,
                            max_epochs=request.max_epochs, max_updates=request.max_updates)
    return model, recipe, config


def sharing_models() -> list[str]:
    """The models with ``share_all_embeddings`` (the Transformer family)."""
    return [name for name, spec in MODELS.items()
            if "share_all_embeddings" in {f.name for f in dataclasses.fields(spec.config_class)}]


def finished_already(request: TrainRequest, tracking_uri: str, config: TrainConfig) -> bool:
    """Whether the run ``--name`` finished already and stays so (said on the console); with
    ``--continue`` it is reopened to train on to the new limits instead."""
    done = runs.find_run(tracking_uri, request.experiment, {"train_name": request.name}) if request.name else None
    if done and runs.status(tracking_uri, done) == "FINISHED":
        if not request.continue_run:
            print(f"{request.name} has finished already (MLflow run {done} in experiment {request.experiment!r}); "
                  f"nothing to do: another --name trains anew, --continue with a higher --max-epochs or "
                  f"--max-updates trains it on")
            return True
        if request.init_from:
            raise UserError("--continue goes on from the run's own checkpoint; --init-from starts a new run")
        runs.reopen(tracking_uri, done, {"continued_to": _limits(config)})
    elif request.continue_run:
        raise UserError(f"--continue: no finished run named {request.name!r} in experiment {request.experiment!r}")
    return False


def _limits(config: TrainConfig) -> str:
    return ", ".join(f"{key}={getattr(config, key)}" for key in ("max_epochs", "max_updates")
                     if getattr(config, key) is not None)
