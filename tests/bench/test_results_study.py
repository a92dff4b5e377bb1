"""benchmarks/study.py's data, budget and tables: its dataset goes through the dataset I/O layer
(a URI is prepared and published, never a local directory named after it), every row gets the
same budget in updates with its own recipe, the Transformer rows are also scored on averaged
weights, as Vaswani et al. evaluate, and the table tests each row against the baseline over seeds
(Welch, Holm) and seed pair by seed pair, from what a real MLflow store holds."""

import os
import time

import pytest
from helpers import benchmark_module

from platform.data import dataset as ds
from platform.data import storage


@pytest.fixture(scope="module")
def study():
    return benchmark_module("study")


@pytest.fixture(scope="module")
def s3_env():
    from helpers import require_module
    from servers import MotoServer

    require_module("moto", "moto[server] (the dev extra) is the S3-compatible test server")
    server = MotoServer()
    server.start(dict(os.environ))
    try:
        server.create_bucket("data")
        yield server.env()
    finally:
        server.stop()


def test_the_study_prepares_tanaka_straight_to_s3_once(study, tanaka, s3_env, tmp_path, monkeypatch):
    for key, value in s3_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    args = study.build_parser().parse_args(["--tanaka", str(tanaka), "--dataset", "s3://data/tanaka"])
    assert study.prepare(args) == "s3://data/tanaka"
    meta = ds.read_meta("s3://data/tanaka")
    assert (meta["src_lang"], meta["tgt_lang"]) == ("ja", "en") and ds.split_exists("s3://data/tanaka", "test")
    assert list(tmp_path.iterdir()) == []  # no local "s3:" directory
    marker = storage.locate("s3://data/tanaka").child(storage.COMMITTED)
    written = marker.fs.get_file_info(marker.path).mtime
    assert study.prepare(args) == "s3://data/tanaka"  # prepared once: the second call reads it
    assert marker.fs.get_file_info(marker.path).mtime == written


def test_transformer_rows_are_also_scored_on_their_last_validations_averaged(study):
    assert study.averaged_window("deguchi2019/enc+dec", 10) == 5 and study.averaged_window("omote2019/rel", 3) == 3
    assert study.averaged_window("deguchi2019/baseline", 1) is None  # one epoch: nothing to average
    assert study.averaged_window("yang2017/gated", 10) is None
    assert study.averaged_window("currey2018/seq2seq", 10) is None


def test_every_row_gets_the_same_budget_in_updates_and_its_own_recipe(study):
    args = study.build_parser().parse_args(["--max-updates", "1200", "--epoch-updates", "300"])
    base, dbsa, deprel = (study.row_config(row, 2, args) for row in study.STUDY_ROWS)
    for config in (base, dbsa, deprel):
        assert (config.max_updates, config.max_steps_per_epoch, config.max_epochs) == (1200, 300, None)
        assert (config.seed, config.patience, config.eval.max_sentences) == (2, None, None)  # all 500 dev pairs
        assert config.average_last == study.AVERAGE_LAST
        # one schedule and batch for all (the size's: a 4,000-update warm-up exceeds the budget)
        assert (config.optim.lr, config.optim.warmup_steps, config.batching.max_tokens) == (
            base.optim.lr, base.optim.warmup_steps, base.batching.max_tokens)
        assert config.optim.warmup_steps < config.max_updates
    assert (base.model.name, dbsa.model.name, deprel.model.name) == ("transformer", "dbsa", "deprel")
    assert dbsa.model.p_enc is not None and dbsa.model.p_dec is not None  # DBSA on both sides
    assert (deprel.model.k_clip, deprel.model.l_clip) == (2, 2)  # Omote's k = 2, l = 2


def test_the_generated_section_replaces_only_itself(study, tmp_path):
    page = tmp_path / "results.md"
    page.write_text(f"# Title\n\nbefore\n\n{study.BEGIN}\nold table\n{study.END}\n\nafter\n", encoding="utf-8")
    study.write_section(page, "new table\n")
    study.write_section(page, "newer table\n")
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# Title\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert "newer table" in text and "new table\n" not in text and "old table" not in text
    assert text.count(study.BEGIN) == 1 and text.count(study.END) == 1


def log_study_run(client, experiment_id: str, row: str, seed: int, outputs: dict[str, list[str]], ref: list[str],
                  scratch, study, args):
    """A finished study run as ``run_row`` and ``complete`` leave one: tags, the params of the
    config ``args`` train it with, metrics, and per test kind (``test``,
    ``test_as_omote2019-baseline``, ...) its scores and files."""
    from mlflow.entities import Param
    from sacrebleu.metrics import BLEU, CHRF

    from platform.tracking.runs import run_params

    run = client.create_run(experiment_id, tags={"study_row": row, "seed": str(seed),
                                                 "test_sacrebleu_signature": "nrefs:1|case:mixed|tok:13a"})
    run_id = run.info.run_id
    for key, value in {"num_parameters": 1000.0, "tokens_per_s": 500.0, "study_wall_s": 60.0}.items():
        client.log_metric(run_id, key, value)
    for step, value in ((250, 1.0 + seed), (500, 2.0 + seed)):
        client.log_metric(run_id, "dev_bleu", value, step=step)
    params = run_params(study.row_config(row, seed, args), {})
    client.log_batch(run_id, params=[Param(key, value) for key, value in params.items()])
    for kind, hyp in outputs.items():
        client.log_metric(run_id, f"{kind}_bleu", BLEU().corpus_score(hyp, [ref]).score)
        client.log_metric(run_id, f"{kind}_chrf", CHRF().corpus_score(hyp, [ref]).score)
        out = scratch / f"{run_id}-{kind}"
        out.mkdir()
        for name, lines in (("hyp", hyp), ("ref", ref)):
            (out / f"{kind}.{name}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            client.log_artifact(run_id, str(out / f"{kind}.{name}"), f"{kind}/test")
    client.set_terminated(run_id)
    time.sleep(0.01)  # distinct start times: the latest run of a (row, seed) wins
    return run_id


def test_the_table_tests_each_row_against_its_papers_baseline_over_seeds_and_seed_pair_by_seed_pair(study, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("tanaka-study", artifact_location=str(tmp_path / "artifacts"))
    ref = [f"the cat {i} sat on the mat near the door" for i in range(40)]
    worse = [f"a dog {i} sat" for i in range(40)]  # far from the reference
    better = [line if i % 4 else f"the cat {i} sat" for i, line in enumerate(ref)]
    middling = [line if i % 2 else f"the cat {i} sat" for i, line in enumerate(ref)]
    args = study.build_parser().parse_args(["--tracking-uri", uri, "--out", str(tmp_path / "results.md"),
                                            "--figure", str(tmp_path / "img" / "curves.png"), "--max-updates", "500",
                                            "--tanaka", str(tmp_path / "no-corpus")])  # no seen pairs: no column
    for seed in (1, 2):
        # the baseline decoded as Deguchi (its own recipe) does badly, decoded as Omote (greedy) well
        log_study_run(client, experiment, "deguchi2019/baseline", seed,
                      {"test": worse, "test_as_omote2019-baseline": ref}, ref, tmp_path, study, args)
        log_study_run(client, experiment, "deguchi2019/enc+dec", seed, {"test": better}, ref, tmp_path, study, args)
        log_study_run(client, experiment, "omote2019/dep+rel", seed,
                      {"test": better, "test_as_deguchi2019-baseline": ref}, ref, tmp_path, study, args)
        log_study_run(client, experiment, "omote2019/rel", seed,  # Omote's other baseline, below dep+rel
                      {"test": middling, "test_as_deguchi2019-baseline": middling}, ref, tmp_path, study, args)
    other = study.build_parser().parse_args(["--max-updates", "800"])  # another budget: neither reused nor shown
    log_study_run(client, experiment, "omote2019/dep+rel", 1, {"test": ref}, ref, tmp_path, study, other)

    def rows(text: str, title: str) -> dict[str, dict[str, str]]:
        table = [line for line in text.split(f"### {title}")[1].split("###")[0].splitlines() if line.startswith("| ")]
        header = [cell.strip() for cell in table[0].strip("|").split(" | ")]
        return {line.split(" | ")[0].strip("| "): dict(zip(header, (c.strip() for c in line.strip("|").split(" | "))))
                for line in table[1:]}

    text = study.tables(args)
    deguchi, omote = rows(text, "Deguchi"), rows(text, "Omote")
    baseline, dbsa = deguchi["deguchi2019/baseline"], deguchi["deguchi2019/enc+dec"]
    assert baseline["seeds"] == dbsa["seeds"] == "2" and baseline["decoding"] == "beam 4, α 0.6"
    def p(cell: str) -> float:  # a paired test's cell: the median p over the seed pairs, then how many are below 0.05
        return float(cell.split(" ")[0])

    assert baseline["BLEU p (bs)"] == "–" and p(dbsa["BLEU p (bs)"]) < 0.01 and p(dbsa["BLEU p (ar)"]) < 0.01
    assert dbsa["BLEU p (bs)"].endswith(" (2 of 2 < 0.05)")  # seeds 1 and 2, each pair tested on its own
    # over seeds (the primary test): the same outputs each seed, so the gain has no spread to weigh it
    # against: a difference without an interval, and no p (p 0 would call it certain)
    assert [baseline[key] for key in ("Δ BLEU (95% CI)", "p (seeds)", "p (Holm)")] == ["–", "–", "–"]
    assert dbsa["Δ BLEU (95% CI)"].startswith("+") and "[" not in dbsa["Δ BLEU (95% CI)"]
    assert dbsa["p (seeds)"] == dbsa["p (Holm)"] == "–"
    assert "test BLEU, unseen" not in dbsa  # no corpus to tell the seen pairs: no such column
    # dev BLEU still rose at the last validation of every run: none converged, each best at 500
    assert dbsa["best at update"] == "500, 500 (of 500)" and dbsa["converged"] == "0 of 2"
    assert study.convergence({250: 1.0, 500: 3.0, 750: 2.0, 1000: 3.0, 1250: 2.5}) == {
        "best_step": 500.0, "last_step": 1250.0, "converged": 1.0}  # 3 validations without a better one
    assert study.convergence({250: 1.0, 500: 3.0, 750: 2.0, 1000: 2.9})["converged"] == 0.0
    greedy, deprel = omote["omote2019/baseline (the deguchi2019/baseline runs)"], omote["omote2019/dep+rel"]
    assert greedy["decoding"] == deprel["decoding"] == "greedy" and greedy["test BLEU"].startswith("100.00")
    assert p(deprel["BLEU p (bs)"]) < 0.01
    assert float(deprel["test BLEU"].split(" ")[0]) < float(greedy["test BLEU"].split(" ")[0])  # worse
    assert deprel["Δ BLEU (95% CI)"].startswith("-")
    assert deprel["test BLEU"].endswith("± 0.00")  # its two seeds, not the perfect run of another budget
    # Omote's table again, every row decoded with beam 4, α 0.6 as Deguchi decode: there dep+rel is perfect
    # and the baseline (Deguchi's own runs, as they decode) far behind
    beam = rows(text, "Omote et al. 2019, Table 2 (dependency-based relative positions), every row decoded as")
    beam_baseline = beam["omote2019/baseline as deguchi2019/baseline decodes (the deguchi2019/baseline runs)"]
    beam_deprel = beam["omote2019/dep+rel as deguchi2019/baseline decodes"]
    assert beam_baseline["decoding"] == beam_deprel["decoding"] == "beam 4, α 0.6"
    assert beam_baseline["test BLEU"] == baseline["test BLEU"] and beam_deprel["test BLEU"].startswith("100.00")
    assert beam_deprel["Δ BLEU (95% CI)"].startswith("+") and p(beam_deprel["BLEU p (bs)"]) < 0.01
    assert "| 2.50 | 3.50 |" in text  # dev BLEU at updates 250 and 500, mean over seeds 1 and 2
    assert (tmp_path / "img" / "curves.png").stat().st_size > 1000
    assert "8 runs (500 updates each)" in text and "deguchi2019/enc, " in text.split("Rows not run:")[1]
    # Omote et al.'s other comparison, dep+rel against rel, under each Omote table, in its Holm family
    for title in ("Omote et al. 2019, Table 2 (dependency-based relative positions)\n",
                  "Omote et al. 2019, Table 2 (dependency-based relative positions), every row decoded as"):
        section = text.split(f"### {title}")[1].split("###")[0]
        (line,) = [line for line in section.splitlines() if line.startswith("| ") and " against omote2019/rel" in line]
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        assert cells[0].startswith("omote2019/dep+rel") and cells[1] == "2 / 2"
        assert cells[2].startswith("+") and cells[3] == cells[4] == "–" and p(cells[5]) < 0.05  # seeds alike
        assert "the paper's other comparisons, tested alike, in the same Holm family" in section
        # the family planned in advance: rel, dep and dep+rel against the baseline, dep+rel against rel
        assert "Holm's correction over the paper table's 4 comparisons (each row against the baseline and its 1 " \
               "other comparison), those without runs yet counted as p = 1" in " ".join(section.split())
    deguchi_lines = text.split("### Deguchi")[1].split("###")[0].splitlines()
    assert not [line for line in deguchi_lines if line.startswith("| ") and " against " in line]  # none of its own

    # unequal runs: enc+dec seed 3 without the baseline's, the baseline's seed 4 without enc+dec's
    log_study_run(client, experiment, "deguchi2019/enc+dec", 3, {"test": better}, ref, tmp_path, study, args)
    log_study_run(client, experiment, "deguchi2019/baseline", 4, {"test": worse, "test_as_omote2019-baseline": ref},
                  ref, tmp_path, study, args)
    again = rows(study.tables(args), "Deguchi")
    assert again["deguchi2019/baseline"]["seeds"] == again["deguchi2019/enc+dec"]["seeds"] == "3"  # every run
    assert again["deguchi2019/enc+dec"]["BLEU p (bs)"] == dbsa["BLEU p (bs)"]  # paired on seeds 1 and 2, as before
    # a third seed pair whose two runs translate almost alike (three lines better, three worse): not below 0.05
    close = [f"a cat {i} sat" if i in (0, 4, 8) else "a dog" if i in (1, 2, 3) else line
             for i, line in enumerate(worse)]
    log_study_run(client, experiment, "deguchi2019/enc+dec", 4, {"test": close}, ref, tmp_path, study, args)
    cell = rows(study.tables(args), "Deguchi")["deguchi2019/enc+dec"]["BLEU p (ar)"]
    assert cell.endswith(" (2 of 3 < 0.05)") and p(cell) < 0.01  # the median of three: one of the two small ones


def test_each_runs_best_update_is_read_against_its_own_last_update(study):
    """Runs stopped early end at different updates: each best update stands beside its own end."""
    assert study.convergence({250: 1.0, 500: 3.0, 750: 2.0, 1000: 2.5}, 2) == {
        "best_step": 500.0, "last_step": 1000.0, "converged": 1.0}
    assert study.convergence_cells([4750.0, 3750.0], [5500.0, 4500.0], [1.0, 1.0]) == {
        "best at update": "4750 (of 5500), 3750 (of 4500)", "converged": "2 of 2"}
    assert study.convergence_cells([2000.0, 1750.0], [2000.0, 2000.0], [0.0, 0.0])["best at update"] == (
        "2000, 1750 (of 2000)")


def test_a_row_decoded_as_another_is_scored_from_its_source_rows_runs_where_both_train_alike(study):
    shared = study.decoded_as(study.build_parser().parse_args([]))
    assert shared == {"omote2019/baseline": "deguchi2019/baseline"}  # at the cpu size: the same training
    assert study.decoded_as(study.build_parser().parse_args(["--size", "paper"])) == {}  # 224 vs 256 sentences
    kinds = study.test_kinds("deguchi2019/baseline", 8, shared)
    assert kinds == {"test": None, "test_avg5": None, "test_as_omote2019-baseline": "omote2019/baseline"}
    # one validation: nothing to average; Omote's rows are also decoded as Deguchi decode (beam 4, α 0.6)
    assert study.test_kinds("omote2019/dep+rel", 1, shared) == {"test": None,
                                                                 "test_as_deguchi2019-baseline": "deguchi2019/baseline"}
    assert study.decoding("omote2019/baseline") == "greedy" and study.decoding("deguchi2019/baseline") != "greedy"
    with pytest.raises(SystemExit, match="scored from its source"):
        study.main(["--rows", "omote2019/baseline"])


def test_the_test_pairs_whose_reference_is_a_training_target_are_scored_apart(study, tanaka):
    """60 of Tanaka's 500 English test references are training targets, verbatim: the tables
    score the test set without them too."""
    import sacrebleu

    from platform.training.metrics import detokenizer

    seen = study.training_targets(tanaka)
    detokenize = detokenizer("en")
    references = [detokenize(line.rstrip("\n")) for line in open(tanaka / "test.en", encoding="utf-8")]
    assert len(references) == 500 and sum(reference in seen for reference in references) == 60
    # a run that gets exactly the seen pairs right: its unseen BLEU is that of the others alone
    hypotheses = [reference if reference in seen else "a dog" for reference in references]
    kept = [i for i, reference in enumerate(references) if reference not in seen]
    expected = sacrebleu.corpus_bleu([hypotheses[i] for i in kept], [[references[i] for i in kept]]).score
    unseen = study.unseen_bleu({"hyp": hypotheses, "ref": references}, seen, "13a")
    assert unseen == expected < sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert study.training_targets(tanaka.parent / "no-corpus") == frozenset()
