"""A command's flags are its request's fields, declared once (``flags.flag``): the parser and the
request cannot disagree on a name, a type or a default."""

import dataclasses

import pytest

from platform import train, tune
from platform.launch.training_run import TrainRequest
from platform.sweeps.tuning import SweepRequest


@pytest.mark.parametrize("command, request_class, required", [(train, TrainRequest, []),
                                                               (tune, SweepRequest, ["--space", "dbsa"])])
def test_the_flags_are_the_requests_fields_with_its_defaults(command, request_class, required):
    given = vars(command.build_parser().parse_args(required))
    made = request_class(**given)  # every flag is a field, none is left out
    flagged = [f.name for f in dataclasses.fields(request_class) if "flag" in f.metadata]
    assert sorted(given) == sorted(flagged)
    defaults = request_class(**({"space": "dbsa"} if required else {}))
    assert {k: getattr(made, k) for k in flagged} == {k: getattr(defaults, k) for k in flagged}


def test_a_flags_type_comes_from_its_fields_annotation():
    args = tune.build_parser().parse_args(["--space", "dbsa", "--num-samples", "4", "--time-budget", "2m",
                                           "--objective", "dev_bleu:max", "--objective", "num_parameters:min",
                                           "--cpus-per-worker", "0.5", "--smoke"])
    assert (args.num_trials, args.time_budget, args.cpus_per_worker, args.smoke) == (4, 120.0, 0.5, True)
    assert args.objective == ["dev_bleu:max", "num_parameters:min"]
    args = train.build_parser().parse_args(["--model", "dbsa", "--continue", "--set", "a=1", "--set", "b=2"])
    assert (args.continue_run, args.overrides, args.max_epochs) == (True, ["a=1", "b=2"], None)
    with pytest.raises(SystemExit):
        train.build_parser().parse_args(["--workers", "two"])
