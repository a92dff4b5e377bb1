"""The Optuna study kept: copied into SQLite under the sweep's name, with Optuna's plots."""

import optuna

from platform.sweeps.study import save_study, study_plots


def a_study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=1))

    def objective(trial):
        lr, layer = trial.suggest_float("lr", 1e-4, 1e-2, log=True), trial.suggest_int("p_enc", 1, 2)
        for epoch in range(3):
            trial.report(lr * 100 * epoch + layer, epoch)
        if lr < 3e-4:
            raise optuna.TrialPruned()
        return lr * 300 + layer

    study.optimize(objective, n_trials=8)
    return study


def test_the_study_is_copied_whole_and_replaced_on_the_next_save(tmp_path):
    study = a_study()
    save_study(study, "sweep-a", tmp_path)
    study.optimize(lambda trial: trial.suggest_float("lr", 1e-4, 1e-2, log=True) + trial.suggest_int("p_enc", 1, 2),
                   n_trials=2)  # a resumed session: more trials
    saved = save_study(study, "sweep-a", tmp_path)
    loaded = optuna.load_study(study_name="sweep-a", storage=f"sqlite:///{saved}")
    assert [t.state for t in loaded.trials] == [t.state for t in study.trials] and len(loaded.trials) == 10
    assert [t.intermediate_values for t in loaded.trials] == [t.intermediate_values for t in study.trials]
    assert {t.state.name for t in loaded.trials} == {"COMPLETE", "PRUNED"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["optuna.db"]  # no temporary left


def test_optunas_plots_are_drawn_even_for_a_study_of_one_trial(tmp_path):
    names = sorted(p.name for p in study_plots(a_study(), tmp_path / "full"))
    assert names == ["contour.png", "intermediate_values.png", "optimization_history.png", "param_importances.png",
                     "slice.png"]
    single = optuna.create_study()
    single.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)
    drawn = sorted(p.name for p in study_plots(single, tmp_path / "one"))  # never an error at the end of a sweep
    assert "optimization_history.png" in drawn and all((tmp_path / "one" / name).stat().st_size for name in drawn)


def test_the_contour_plot_pairs_the_three_most_important_knobs_else_the_first_three():
    from platform.sweeps.study import contour_knobs, importance_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=3))
    weights = {"a": 0.0, "b": 0.0, "c": 10.0, "d": 0.0, "e": 10.0, "f": 10.0, "g": 0.0}  # c, e and f matter

    def objective(trial):
        return sum(weight * trial.suggest_float(knob, 0, 1) for knob, weight in weights.items())

    study.optimize(objective, n_trials=3)
    assert contour_knobs(study, importance_study(study)[0]) == ["a", "b", "c"]  # too few trials: the first three
    study.optimize(objective, n_trials=77)
    assert sorted(contour_knobs(study, importance_study(study)[0])) == ["c", "e", "f"]


def test_a_sweep_on_uri_storage_logs_its_study_and_keeps_no_scratch_copy(tmp_path, monkeypatch):
    """With s3:// storage the study is saved in a scratch directory, logged to the parent run,
    and the scratch directory goes (a real MLflow store; nothing is written to the URI itself)."""
    from mlflow.tracking import MlflowClient

    from platform.sweeps.study import log_study
    from platform.tracking import runs
    from platform.tracking.logger import RunLogger

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id = runs.start_run(uri, "studies", "parent", {}, {}, "x: 1\n")
    assert log_study(RunLogger(uri, run_id, reopen=False), a_study(), "far", "s3://bucket/sweeps/far") is None
    logged = {a.path for a in MlflowClient(uri).list_artifacts(run_id, "optuna")}
    assert {"optuna/optuna.db", "optuna/intermediate_values.png"} <= logged
    assert list(scratch.iterdir()) == []


def test_a_new_storage_opened_by_two_at_once_opens_for_both(tmp_path):
    """The sweep creating its ``optuna.db`` while ``optuna-dashboard`` (or a second sweep) opens
    the same new file: both create the schema at once, and the slower one's 'table already
    exists' or UNIQUE constraint on the version row is tried again instead of ending the sweep."""
    import threading

    from platform.sweeps.study import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    def open_it(url, barrier, opened, failed):
        barrier.wait(timeout=60)
        try:
            opened.append(open_storage(url))
        except Exception as error:  # noqa: BLE001 - reported below
            failed.append(repr(error)[:200])

    for attempt in range(8):
        url = f"sqlite:///{tmp_path}/{attempt}/optuna.db"
        opened, failed, barrier = [], [], threading.Barrier(2)
        threads = [threading.Thread(target=open_it, args=(url, barrier, opened, failed)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not failed and len(opened) == 2, failed
        optuna.create_study(study_name="s", storage=opened[0]).optimize(lambda t: t.suggest_float("x", 0, 1), 1)
        assert len(optuna.load_study(study_name="s", storage=opened[1]).trials) == 1
