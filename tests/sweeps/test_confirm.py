"""The confirmation stage's table (platform/sweeps/confirm.py) from a real MLflow store: the
paired tests pair each config's seed s with the baseline's seed s, one pair at a time."""

from platform.data.dataset import DatasetRef
from platform.launch.driver import Job
from platform.sweeps.confirm import Candidate, confirmation_table
from platform.sweeps.spaces import load_space
from platform.sweeps.sweep import Sweep
from platform.tracking.significance import PAIRED, paired_by_seed

REFERENCE = [f"the cat {i} sat on the mat near the door" for i in range(40)]
WORSE = [f"a dog {i} sat" for i in range(40)]
NEAR_WORSE = [f"a cat {i} sat" if i in (0, 4, 8) else "a dog" if i in (1, 2, 3) else line
              for i, line in enumerate(WORSE)]  # three lines better, three worse
BETTER = [line if i % 4 else f"the cat {i} sat" for i, line in enumerate(REFERENCE)]


def log_confirm_run(client, experiment: str, hypotheses: list[str], scratch) -> str:
    """A scored confirmation run as ``score_on_test`` leaves one: test metrics, signature, files."""
    from sacrebleu.metrics import BLEU, CHRF

    run_id = client.create_run(experiment, tags={"test_sacrebleu_signature": "nrefs:1|case:mixed|tok:13a"}).info.run_id
    client.log_metric(run_id, "test_bleu", BLEU().corpus_score(hypotheses, [REFERENCE]).score)
    client.log_metric(run_id, "test_chrf", CHRF().corpus_score(hypotheses, [REFERENCE]).score)
    files = scratch / run_id / "tanaka"
    files.mkdir(parents=True)
    for name, lines in (("hyp", hypotheses), ("ref", REFERENCE)):
        (files / f"tanaka.{name}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    client.log_artifacts(run_id, str(files), "test/tanaka")
    client.set_terminated(run_id)
    return run_id


def test_the_paired_tests_pair_each_configs_seed_with_the_baselines_same_seed(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("confirm", artifact_location=str(tmp_path / "artifacts"))
    job = Job(dataset=DatasetRef("demo", "demo"), workers=1, gpus_per_worker=0.0, cpus_per_worker=1.0,
              experiment="confirm", tracking_uri=uri, run_name="s", storage_path=str(tmp_path), max_failures=0)
    sweep = Sweep(name="s", space=load_space("papers"), num_samples=1, max_epochs=1, seed=1, job=job)
    chosen = [Candidate("baseline deguchi2019/baseline", {}, {}, is_baseline=True),
              Candidate("trial a", {}, {"recipe": "omote2019/dep+rel"})]
    # seed 1: near the baseline's (not below 0.05 by randomisation); seed 2: far better than the baseline's
    outputs = {(0, 1): WORSE, (0, 2): BETTER, (1, 1): NEAR_WORSE, (1, 2): REFERENCE}
    scored = {key: log_confirm_run(client, experiment, lines, tmp_path / "files") for key, lines in outputs.items()}
    baseline, config = confirmation_table(sweep, chosen, scored, seeds=2).rows
    assert all(baseline[key] == "–" for key in PAIRED)
    expected = paired_by_seed([(outputs[(0, seed)], outputs[(1, seed)], REFERENCE) for seed in (1, 2)], "13a")
    assert {key: config[key] for key in PAIRED} == expected
    assert config["BLEU p (ar)"].endswith(" (1 of 2 < 0.05)")  # seed 1 with seed 1: the near pair is not below
