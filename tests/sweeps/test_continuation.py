"""Carrying an earlier sweep's trials into a new sweep's study (``--warm-start-from``), and the
flags that continue a sweep, refused where they cannot go together; no Ray (the sweeps
themselves: tests/test_tune.py)."""

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from platform.errors import UserError
from platform.sweeps.continuation import carry_trials
from platform.sweeps.spaces import load_space
from platform.sweeps.tuning import SweepRequest, check_continuation


def trial(params: dict, value: float, state=TrialState.COMPLETE):
    wide = {key: (IntDistribution(1, 1000) if isinstance(v, int) else FloatDistribution(1e-6, 10.0))
            for key, v in params.items()}
    return create_trial(state=state, params=params, distributions=wide,
                        value=None if state == TrialState.FAIL else value, intermediate_values={1: value})


def test_only_the_finished_trials_that_fit_the_new_space_are_carried_with_their_values():
    space = load_space("dbsa", "sweep")  # p_enc/p_dec in 1..layers, lr in [3e-4, 3e-3], ...
    fits = {"p_enc": 1, "p_dec": 1, "lambda_enc": 1.0, "lambda_dec": 1.0, "optim.lr": 1e-3,
            "optim.warmup_steps": 100, "dropout": 0.1}
    source = optuna.create_study(study_name="old", direction="maximize")
    source.add_trials([
        trial(fits, 20.0),
        trial({**fits, "optim.lr": 5e-2}, 30.0),  # outside the new space's learning rates
        trial({k: v for k, v in fits.items() if k != "dropout"}, 25.0),  # a knob the old space lacked
        trial({**fits, "dropout": 0.2}, 12.0, TrialState.PRUNED),
        trial({**fits, "dropout": 0.25}, 1.0, TrialState.FAIL),  # never carried: not finished
    ])
    target = optuna.create_study(study_name="new", direction="maximize")
    carried = carry_trials(source, target, space)
    assert (carried.carried, carried.finished) == (2, 4)
    assert carried.line() == ("warm start: carried 2 of the 4 finished trials of sweep old into this sweep's study "
                              "(2 outside this space): its trials 0, 3")
    assert [(t.state, t.values, t.intermediate_values) for t in target.trials] == [
        (TrialState.COMPLETE, [20.0], {1: 20.0}), (TrialState.PRUNED, [12.0], {1: 12.0})]
    assert [t.user_attrs for t in target.trials] == [{"warm_start_from": "old", "warm_start_trial": 0},
                                                     {"warm_start_from": "old", "warm_start_trial": 3}]
    assert target.trials[0].distributions["optim.lr"].high == pytest.approx(3e-3)  # the new space's
    minimized = optuna.create_study(study_name="min", direction="minimize")
    with pytest.raises(UserError, match="its objectives go"):
        carry_trials(source, minimized, space)


@pytest.mark.parametrize("flags,refusal", [
    ({"extend": "s1"}, "--extend needs --num-trials"),
    ({"extend": "s1", "num_trials": 2, "resume": True, "name": "s1"}, "without --resume"),
    ({"extend": "s1", "num_trials": 2, "warm_start_from": "s0"}, "without --resume, --name or --warm-start-from"),
    ({"warm_start_from": "s1", "name": "s1"}, "to add trials to a sweep, --extend it"),
    ({"resume": True}, "--resume needs the --name"),
])
def test_continuing_flags_that_cannot_go_together_are_refused(flags, refusal):
    with pytest.raises(UserError, match=refusal):
        check_continuation(SweepRequest(space="dbsa", **flags))


def test_extending_a_sweep_with_other_search_flags_is_refused_before_any_work(tmp_path):
    """The restored searcher and scheduler are the sweep's own: flags that would build others
    (another scheduler, objective, seeds, study storage) are refused, naming what differs."""
    import dataclasses

    from platform.sweeps.searcher import SearchSettings
    from platform.sweeps.tuning import check_extendable
    from platform.tracking import runs

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    space = load_space("dbsa", "sweep")
    settings = SearchSettings()
    request = SweepRequest(space="dbsa", extend="s1", num_trials=2)
    recorded = {"space": "dbsa", "seeds_per_config": "1", "objectives": "dev_bleu:max", "study_storage": "sqlite:///x",
                **{k: str(v) for k, v in settings.params(1, space.base_config.max_epochs).items()}}
    parent = runs.start_run(uri, "sweep", "s1", recorded, {"sweep_parent": "s1"}, "")
    check_extendable(uri, parent, "s1", request, space, settings, "sqlite:///x")  # the same: fine
    other = dataclasses.replace(settings, scheduler="median")
    with pytest.raises(UserError, match=r"that sweep ran with scheduler asha \(not median\)"):
        check_extendable(uri, parent, "s1", request, space, other, "sqlite:///x")
    with pytest.raises(UserError, match=r"study_storage sqlite:///x \(not sqlite:///y\)"):
        check_extendable(uri, parent, "s1", request, space, settings, "sqlite:///y")
    with pytest.raises(UserError, match="no sweep of that name"):
        check_extendable(uri, None, "s2", request, space, settings, "sqlite:///x")


def test_an_extensions_experiment_sits_beside_the_sweep_with_a_uris_options_kept():
    from platform.sweeps.continuation import experiment_name, under

    assert under("s3://bucket/ray?endpoint_override=h:9000", experiment_name("s1", 2)) == (
        "s3://bucket/ray/s1-extend-2?endpoint_override=h:9000")
    assert under("/data/runs/", experiment_name("s1", 0)) == "/data/runs/s1"
