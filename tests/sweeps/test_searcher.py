"""The sweep's choices without Ray's cluster: samplers, schedulers, grids, recipes as a knob,
objectives, importances from enough trials, durations, the Pareto front."""

from __future__ import annotations

import argparse

import optuna
import pytest
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule

from platform import flags
from platform.errors import ConfigError, UserError
from platform.sweeps.searcher import (
    SearchSettings,
    check_settings,
    grid_size,
    make_sampler,
    make_scheduler,
    make_searcher,
)
from platform.sweeps.spaces import load_space
from platform.sweeps.study import MIN_COMPLETE, importance_study, study_plots
from platform.sweeps.summary import mark_pareto_front


def test_each_searcher_is_the_optuna_sampler_it_names_and_seeded():
    space = load_space("dbsa", "smoke")
    kinds = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler,
             "cmaes": optuna.samplers.CmaEsSampler, "qmc": optuna.samplers.QMCSampler}
    for name, kind in kinds.items():
        assert isinstance(make_sampler(SearchSettings(searcher=name), space, seed=3), kind)
    # the same seed samples the same configs
    draws = []
    for _ in range(2):
        study = optuna.create_study(sampler=make_sampler(SearchSettings(searcher="random"), space, seed=3))
        trial = study.ask()
        space.define_by_run(trial)
        draws.append(trial.params)
    assert draws[0] == draws[1]


def test_each_scheduler_is_rays_with_its_parameters():
    assert isinstance(make_scheduler(SearchSettings(scheduler="none"), 4), FIFOScheduler)
    median = make_scheduler(SearchSettings(scheduler="median", grace_period=2, min_samples=2), 4)
    assert isinstance(median, MedianStoppingRule)
    asha = make_scheduler(SearchSettings(scheduler="asha", grace_period=1, reduction_factor=3), 9)
    brackets = lambda scheduler: scheduler.debug_string().count("Bracket")  # noqa: E731 - its public summary
    assert isinstance(asha, ASHAScheduler) and brackets(asha) == 1
    hyperband = make_scheduler(SearchSettings(scheduler="hyperband", reduction_factor=3), 9)
    assert brackets(hyperband) == 3  # log_3(9) + 1 brackets, as HyperBand's s_max + 1
    with pytest.raises(ValueError, match="reduction_factor"):
        SearchSettings(reduction_factor=1)


def test_a_grid_takes_choices_small_int_ranges_and_given_values_and_refuses_a_float_without():
    papers = load_space("papers", "smoke")
    grid = papers.grid()
    assert grid["recipe"] == ["deguchi2019/baseline", "deguchi2019/enc+dec", "omote2019/dep+rel"]
    assert grid["k_clip"] == [2, 4, 8] and grid["optim.lr"] == [1.0e-3, 2.0e-3]
    assert grid_size(papers) == 3 * 3 * 3 * 3 * 2 * 2
    dbsa = load_space("dbsa", "smoke")
    with pytest.raises(ConfigError, match="params.lambda_enc needs grid values"):
        check_settings(SearchSettings(searcher="grid"), dbsa, None)


def test_the_papers_space_builds_each_trial_from_its_recipe_with_its_own_knobs():
    space = load_space("papers", "smoke")
    assert space.model == "mixed" and list(space.bases) == ["deguchi2019/baseline", "deguchi2019/enc+dec",
                                                           "omote2019/dep+rel"]
    assert space.first_points() == [
        {"recipe": "deguchi2019/enc+dec", "lambda_enc": 1.0, "lambda_dec": 1.0, "optim.lr": 2.0e-3},
        {"recipe": "omote2019/dep+rel", "k_clip": 2, "l_clip": 2, "optim.lr": 2.0e-3}]
    dbsa = space.trial_config({"recipe": "deguchi2019/enc+dec", "lambda_enc": 2.0, "lambda_dec": 0.5})
    assert dbsa["model"]["name"] == "dbsa" and dbsa["model"]["lambda_enc"] == 2.0 and "recipe" not in dbsa
    deprel = space.trial_config({"recipe": "omote2019/dep+rel", "k_clip": 4})
    assert deprel["model"]["name"] == "deprel" and deprel["model"]["k_clip"] == 4
    assert space.model_of({"recipe": "deguchi2019/baseline"}) == "transformer"
    # a knob is sampled only for the recipes that have it (define-by-run)
    for seed in range(20):
        sampled = space.sample(seed)
        assert ("lambda_enc" in sampled) == (sampled["recipe"] == "deguchi2019/enc+dec")
        assert ("k_clip" in sampled) == (sampled["recipe"] == "omote2019/dep+rel")


def test_a_recipe_knob_must_be_categorical_and_replaces_the_model(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: dbsa\nparams:\n  recipe: {type: categorical, choices: [deguchi2019/enc+dec]}\n")
    with pytest.raises(ConfigError, match="sets no model or recipe"):
        load_space(str(bad), "smoke")
    bad.write_text("params:\n  recipe: {type: categorical, choices: [deguchi2019/nope]}\n")
    with pytest.raises(ConfigError, match="unknown recipe 'deguchi2019/nope'"):
        load_space(str(bad), "smoke")
    bad.write_text("params:\n  optim.lr: {type: float, low: 1.0e-4, high: 1.0e-3}\n")
    with pytest.raises(ConfigError, match="needs a model, or a categorical knob recipe"):
        load_space(str(bad), "smoke")


def test_objectives_from_the_flag_make_a_multi_objective_searcher():
    space = load_space("dbsa", "smoke").with_objectives(["dev_bleu:max", "num_parameters:min"])
    assert space.objectives == [("dev_bleu", "max"), ("num_parameters", "min")] and space.spec.metric == "dev_bleu"
    searcher = make_searcher(space, seed=0, max_iterations=2, settings=SearchSettings(searcher="random"))
    assert searcher.metric == ["dev_bleu", "num_parameters"]
    with pytest.raises(ConfigError, match="multi-objective sweep needs tpe or random"):
        check_settings(SearchSettings(searcher="cmaes"), space, None)
    with pytest.raises(UserError, match="expected METRIC:max or METRIC:min"):
        load_space("dbsa", "smoke").with_objectives(["dev_bleu"])


def test_durations_read_as_people_write_them():
    written = {"90m": 5400, "2h": 7200, "45s": 45, "3600": 3600, "1.5h": 5400}  # text → seconds
    for text, seconds in written.items():
        assert flags.parse_duration(text) == seconds, text
    for text in ("soon", "0", "-5m"):
        with pytest.raises(argparse.ArgumentTypeError):
            flags.parse_duration(text)


def test_the_pareto_front_is_every_finished_row_no_other_dominates():
    rows = [{"trial": "a", "status": "COMPLETE", "dev_bleu": 30.0, "num_parameters": 10.0},
            {"trial": "b", "status": "COMPLETE", "dev_bleu": 25.0, "num_parameters": 5.0},
            {"trial": "c", "status": "COMPLETE", "dev_bleu": 24.0, "num_parameters": 6.0},  # b beats it on both
            {"trial": "d", "status": "ERROR", "dev_bleu": 99.0, "num_parameters": 1.0}]  # failed: never on it
    mark_pareto_front(rows, [("dev_bleu", "max"), ("num_parameters", "min")])
    assert [r["trial"] for r in rows if r["pareto"] == "yes"] == ["a", "b"]


def _study(complete: int, pruned: int):
    study = optuna.create_study(direction="maximize")
    distributions = {name: optuna.distributions.FloatDistribution(0, 1) for name in ("x", "y")}
    for i in range(complete + pruned):
        x, y = (i * 0.37) % 1, (i * 0.61) % 1
        done = i < complete
        study.add_trial(optuna.trial.create_trial(
            params={"x": x, "y": y}, distributions=distributions, value=x if done else None,
            state=optuna.trial.TrialState.COMPLETE if done else optuna.trial.TrialState.PRUNED,
            intermediate_values={1: x / 2, **({2: x} if done else {})}))
    return study


def test_importances_come_from_enough_complete_trials_or_else_the_epoch_enough_trials_reached(tmp_path):
    study, what = importance_study(_study(MIN_COMPLETE, 3))
    assert what == f"{MIN_COMPLETE} complete trials"
    derived, what = importance_study(_study(2, 5))  # 2 complete: fitted on epoch 1, which all 7 reached
    assert what.startswith("the metric at epoch 1 of 7 trials") and len(derived.trials) == 7
    assert importance_study(_study(1, 1))[0] is None  # too few anywhere: no importance plot at all
    assert "param_importances.png" in {p.name for p in study_plots(_study(2, 5), tmp_path / "a")}
    assert "param_importances.png" not in {p.name for p in study_plots(_study(1, 1), tmp_path / "b")}


def test_seed_repeats_keep_their_groups_across_a_save_and_restore(tmp_path):
    """Ray's Repeater saves only its inner searcher: a resumed sweep would lose which trials are
    seeds of one config (and fail when they complete).  Ours carries the groups along."""
    space = load_space("dbsa", "smoke")
    repeater = make_searcher(space, seed=0, max_iterations=2, settings=SearchSettings(searcher="random"),
                             seeds_per_config=2)
    repeater.set_search_properties("dev_bleu", "max", {})
    first, second = repeater.suggest("t0"), repeater.suggest("t1")
    assert (first["__trial_index__"], second["__trial_index__"]) == (0, 1)
    knobs = [{k: v for k, v in config.items() if k != "__trial_index__"} for config in (first, second)]
    assert knobs[0] == knobs[1]
    repeater.on_trial_complete("t0", {"dev_bleu": 10.0, "training_iteration": 2})
    repeater.save_to_dir(str(tmp_path), session_str="s")

    resumed = make_searcher(space, seed=0, max_iterations=2, settings=SearchSettings(searcher="random"),
                            seeds_per_config=2)
    resumed.restore_from_dir(str(tmp_path))
    resumed.on_trial_complete("t1", {"dev_bleu": 20.0, "training_iteration": 2})  # the group's second seed
    from helpers import study_of

    trials = study_of(resumed).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] and trials[0].value == 15.0  # Optuna got the mean


def test_the_space_files_search_section_sets_the_search_and_the_epoch_limit(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("model: transformer\n"
                    "search: {searcher: random, scheduler: median, grace_period: 2, max_epochs: 7}\n"
                    "params:\n  optim.lr: {type: float, low: 1.0e-4, high: 1.0e-3}\n")
    space = load_space(str(path), "smoke")
    assert space.spec.search == SearchSettings(searcher="random", scheduler="median", grace_period=2, max_epochs=7)
    assert space.base["max_epochs"] == 7 and space.base_config.max_epochs == 7  # kept loaded, not re-read
    assert load_space(str(path), "smoke", max_epochs=3).base["max_epochs"] == 3  # --max-epochs wins
    written = path.read_text()
    path.write_text("model: transformer\nsearch: {searcher: annealing}\n"
                    "params:\n  optim.lr: {type: float, low: 1.0e-4, high: 1.0e-3}\n")
    assert space.text == written  # the file as loaded (the sweep's parent run logs it), not as it is now
    with pytest.raises(ConfigError, match="searcher"):
        load_space(str(path), "smoke")


def test_a_trial_run_no_tune_trial_owns_is_closed_as_lost_and_no_other(tmp_path):
    """After a resume: the run of a trial the restored Tune never knew (its driver ended before
    Tune saved it) is closed FAILED with lost=true; a known trial's run, a confirmation run and
    another sweep's run are left as they are (real MLflow store)."""
    from mlflow.tracking import MlflowClient

    from platform.sweeps.sweep import LOST, end_lost_trials
    from platform.tracking import runs

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    parent = runs.start_run(uri, "lost", "sweep", {}, {}, "")
    other = runs.start_run(uri, "lost", "other-sweep", {}, {}, "")
    known = runs.start_run(uri, "lost", "t1", {}, {"trial_id": "aaaa0001"}, "", parent)
    lost = runs.start_run(uri, "lost", "t2", {}, {"trial_id": "bbbb0002"}, "", parent)
    confirm = runs.start_run(uri, "lost", "c1", {}, {"trial_id": "cccc0003", "stage": "confirm"}, "", parent)
    elsewhere = runs.start_run(uri, "lost", "t3", {}, {"trial_id": "dddd0004"}, "", other)
    assert end_lost_trials(uri, "lost", parent, {"aaaa0001"}) == [lost]
    client = MlflowClient(uri)
    closed = client.get_run(lost)
    assert closed.info.status == "FAILED" and closed.data.tags["lost"] == "true" and closed.data.tags["error"] == LOST
    assert [client.get_run(r).info.status for r in (known, confirm, elsewhere)] == ["RUNNING"] * 3
    assert end_lost_trials(uri, "lost", parent, {"aaaa0001"}) == []  # closed once
