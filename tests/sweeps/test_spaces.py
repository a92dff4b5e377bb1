"""Search spaces load strictly, sample valid configs, and the searcher tells pruned trials as PRUNED."""

import pytest
from helpers import run_in_process, study_of

from models import build_model
from platform.errors import ConfigError, UserError
from platform.sweeps.searcher import make_searcher
from platform.sweeps.spaces import load_space
from platform.training.config import load_train_config
from search_spaces import SPACES


@pytest.mark.parametrize("name", sorted(SPACES))
def test_every_space_loads_and_a_sampled_config_builds_a_model(name):
    space = load_space(name, "sweep")
    assert space.knobs and space.first_points()
    sampled = space.sample(seed=3)
    assert set(sampled) <= set(space.knobs)
    config = load_train_config(space.trial_config(sampled))
    for key, value in sampled.items():  # a knob's one name: a model field bare, other sections dotted
        if key == "recipe":  # the papers space: the recipe is the trial's base, its model the recipe's
            assert config.model.name == space.model_of(sampled)
            continue
        section, field = key.split(".") if "." in key else ("model", key)
        assert getattr(getattr(config, section), field) == value
    model = build_model(config.model, 100, 100)
    assert sum(p.numel() for p in model.parameters()) > 0


def test_dbsa_first_point_is_the_paper_scaled_to_the_layer_count():
    six = load_space("dbsa", "sweep", ["model.num_encoder_layers=6", "model.num_decoder_layers=6"])
    assert six.first_points()[0]["p_enc"] == 4 and six.first_points()[0]["lambda_enc"] == 1.0
    three = load_space("dbsa", "cpu", ["model.num_encoder_layers=3", "model.num_decoder_layers=3"])
    assert three.first_points()[0]["p_enc"] == 2
    assert three.bounds("p_enc") == (1, 3)


@pytest.mark.parametrize("size", ["smoke", "sweep", "cpu"])
def test_dbsa_first_point_and_the_default_config_pick_the_same_layers(size):
    from platform.training.config import resolve_config

    point = load_space("dbsa", size).first_points()[0]
    config = resolve_config("dbsa", size).model
    assert (point["p_enc"], point["p_dec"]) == (config.p_enc, config.p_dec)


def test_a_paper_size_sweep_bounds_the_layers_by_the_paper_model():
    space = load_space("dbsa", "paper")
    assert space.bounds("p_enc") == (1, 6) and space.first_points()[0]["p_enc"] == 4


def test_first_points_expand_their_recipe():
    point = load_space("deprel", "sweep").first_points()[0]
    assert point["l_clip"] == 2 and point["k_clip"] == 2 and point["use_rel"] is True


def test_a_first_point_recipe_of_another_model_is_refused(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("model: dbsa\nparams:\n  optim.lr: {type: float, low: 1.0e-4, high: 1.0e-3}\n"
                    "first_points:\n  - {recipe: omote2019/dep, optim.lr: 5.0e-4}\n")
    with pytest.raises(ConfigError, match="deprel recipe, not dbsa"):
        load_space(str(path), "sweep")


def test_conditional_knobs_are_sampled_only_when_their_condition_holds():
    space = load_space("deprel", "sweep")
    samples = [space.sample(seed) for seed in range(30)]
    assert all(("k_clip" in s) == s["use_rel"] for s in samples)
    assert any(not s["use_rel"] for s in samples) and any(s["use_rel"] for s in samples)


def test_bad_space_and_bad_override_are_clear_errors():
    with pytest.raises(UserError, match="unknown search space 'dbsa2'; available: dbsa"):
        load_space("dbsa2", "sweep")
    with pytest.raises(ConfigError, match="unknown config key"):
        load_space("dbsa", "sweep", ["optim.learningrate=1"])
    # ASHA counts a trial's reports as epochs: update intervals would shift its rungs
    with pytest.raises(ConfigError, match="validate_every: a sweep's trials report once per epoch"):
        load_space("dbsa", "sweep", ["validate_every=50"])


def _drive(searcher, trial_id, values):
    searcher.suggest(trial_id)
    for step, value in enumerate(values, start=1):
        searcher.on_trial_result(trial_id, {"dev_bleu": value, "training_iteration": step})
    searcher.on_trial_complete(trial_id, {"dev_bleu": values[-1], "training_iteration": len(values)})


def test_trials_stopped_early_are_told_to_optuna_as_pruned_not_complete():
    from optuna.trial import TrialState
    from ray.tune.search.optuna import OptunaSearch

    space = load_space("gumbel", "sweep")
    ours = make_searcher(space, seed=0, max_iterations=4)
    ours.set_search_properties("dev_bleu", "max", {})
    _drive(ours, "full", [1.0, 2.0, 3.0, 4.0])
    _drive(ours, "stopped", [0.5])  # ASHA stopped it after one epoch
    states = {t.number: t.state for t in study_of(ours).trials}
    assert states == {0: TrialState.COMPLETE, 1: TrialState.PRUNED}
    assert study_of(ours).trials[1].intermediate_values == {1: 0.5}
    # Tune hands the result that made ASHA stop a trial to on_trial_complete only: still recorded
    ours.suggest("direct")
    ours.on_trial_complete("direct", {"dev_bleu": 0.25, "training_iteration": 1})
    stopped = study_of(ours).trials[2]
    assert stopped.state == TrialState.PRUNED and stopped.intermediate_values == {1: 0.25}
    # a trial that stopped itself (its patience) before its last epoch is complete, with its values
    ours.suggest("patient")
    for step, value in enumerate([1.5, 1.5], start=1):
        ours.on_trial_result("patient", {"dev_bleu": value, "training_iteration": step})
    ours.on_trial_complete("patient", {"dev_bleu": 1.5, "training_iteration": 2, "stopped_early": 1.0})
    assert study_of(ours).trials[3].state == TrialState.COMPLETE and study_of(ours).trials[3].value == 1.5
    # Ray's own OptunaSearch would have told Optuna the stopped trial was COMPLETE with 0.5
    plain = OptunaSearch(space=space.define_by_run, metric="dev_bleu", mode="max", seed=0)
    _drive(plain, "stopped", [0.5])
    assert study_of(plain).trials[0].state == TrialState.COMPLETE


def test_dry_run_and_unknown_space_on_the_command_line(capsys):
    from platform import tune  # as its __main__ runs it, in this process (as a process: test_reliability.py)

    result = run_in_process(tune.main, ["--space", "hier", "--dry-run"], capsys)
    assert result.returncode == 0, result.stderr
    assert "gate: one of ['fixed0', 'fixed05', 'fixed1', 'learned']" in result.stdout
    assert "sampled: {" in result.stdout and "name: hier_tree_gru" in result.stdout
    bad = run_in_process(tune.main, ["--space", "nope"], capsys)
    assert bad.returncode == 2 and "unknown search space 'nope'" in bad.stderr and "Traceback" not in bad.stderr


def _asha(max_epochs: int):
    from platform.sweeps.searcher import SearchSettings, make_scheduler

    scheduler = make_scheduler(SearchSettings(), max_epochs)
    scheduler.set_search_properties("dev_bleu", "max")
    return scheduler


def test_ashas_rungs_are_saved_with_the_searcher_and_restored_into_a_fresh_scheduler(tmp_path):
    """Ray saves the searcher with the experiment but not the scheduler (ray#30838): the rungs
    go along with the searcher's state, so a resumed sweep's ASHA stops what it would have."""
    from types import SimpleNamespace

    from ray.tune.schedulers import TrialScheduler

    space = load_space("gumbel", "sweep")
    scheduler = _asha(4)
    searcher = make_searcher(space, seed=0, max_iterations=4, scheduler=scheduler)
    searcher.set_search_properties("dev_bleu", "max", {})
    trials = [SimpleNamespace(trial_id=f"t{i}") for i in range(3)]
    for trial, bleu in zip(trials, (10.0, 20.0, 30.0)):
        scheduler.on_trial_add(None, trial)
        decision = scheduler.on_trial_result(None, trial, {"training_iteration": 1, "dev_bleu": bleu})
        assert decision == TrialScheduler.CONTINUE
    searcher.save_to_dir(str(tmp_path), session_str="s")
    assert searcher.scheduler is scheduler  # saving did not take the scheduler away

    resumed_scheduler = _asha(4)
    resumed = make_searcher(space, seed=0, max_iterations=4, scheduler=resumed_scheduler)
    resumed.restore_from_dir(str(tmp_path))
    assert resumed.scheduler is resumed_scheduler
    late = SimpleNamespace(trial_id="t3")
    for asha in (scheduler, resumed_scheduler):  # a weak 4th trial: both stop it at the first rung
        asha.on_trial_add(None, late)
        assert asha.on_trial_result(None, late, {"training_iteration": 1, "dev_bleu": 5.0}) == TrialScheduler.STOP
    fresh = _asha(4)  # what Ray's resume had before: empty rungs, the weak trial goes on
    fresh.on_trial_add(None, late)
    assert fresh.on_trial_result(None, late, {"training_iteration": 1, "dev_bleu": 5.0}) == TrialScheduler.CONTINUE
    with pytest.raises(UserError, match="saved with 4 max epochs, not 8"):  # other max epochs: refused
        make_searcher(space, seed=0, max_iterations=8, scheduler=_asha(8)).restore_from_dir(str(tmp_path))


def test_the_best_config_never_comes_from_a_failed_trial():
    """Rows come sorted by the metric whatever the status; a failed trial's partial score may top them."""
    from platform.sweeps.summary import best_row

    rows = [{"trial": "failed", "status": "ERROR", "dev_bleu": 50.0},
            {"trial": "pruned", "status": "PRUNED", "dev_bleu": 10.0},
            {"trial": "complete", "status": "COMPLETE", "dev_bleu": 8.0}]
    assert best_row(rows, "dev_bleu")["trial"] == "pruned"
    assert best_row(rows[:1], "dev_bleu") is None


def test_failure_retries_default_to_two_restarts_for_a_training():
    from platform import train

    assert train.build_parser().parse_args(["--model", "dbsa"]).max_failures == 2


def test_a_finished_trial_is_complete_where_it_ran_out_or_stopped_itself_else_pruned():
    from platform.training.stopping import trial_status

    assert trial_status({"training_iteration": 4}, 4) == "COMPLETE"
    assert trial_status({"training_iteration": 2, "stopped_early": 1.0}, 4) == "COMPLETE"  # its patience
    assert trial_status({"training_iteration": 2}, 4) == "PRUNED"  # the scheduler or the time budget
    assert trial_status(None, 4) == "PRUNED"  # stopped before its first report
    assert trial_status({"training_iteration": 4}, 4, error=True) == "ERROR"
