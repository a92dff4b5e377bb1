"""benchmarks/gpu_run.py runs where a GPU is lent only now and then, with minutes to spare: its
dry run on the CPU (``GPU_RUN_DEVICE=cpu``, tiny budgets) goes through every stage a GPU run
does, on the real Tanaka data, where only the GPU image's packages import (``gpu_image``) and
what it lacks is carried as wheels; its table lands in a results file."""

import gzip
import json
import subprocess
import sys

import pytest
from gpu_image import blocked_env, probe
from helpers import ROOT

pytestmark = pytest.mark.slow  # it trains: the benchmark's loop, study and confirmation runs


def first_sentences(source, target, count: int) -> None:
    """The first ``count`` sentences of a gzipped CoNLL-U file."""
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        blocks = handle.read().split("\n\n")[:count]
    with gzip.open(target, "wt", encoding="utf-8") as handle:
        handle.write("\n\n".join(blocks) + "\n\n")


def test_the_gpu_run_goes_through_the_loop_the_study_and_its_table_on_the_cpu(tanaka_dataset, tanaka, tmp_path):
    test = tmp_path / "test"
    for lang in ("ja", "en"):
        first_sentences(tanaka / f"test.{lang}.conllu.gz", tmp_path / f"test.{lang}.conllu.gz", 12)
    out = tmp_path / "out"
    env = {**blocked_env(tmp_path / "site"), "GPU_RUN_DEVICE": "cpu"}  # the GPU image's packages, no others
    assert probe(env, "torch") and probe(env, "sacrebleu") and not probe(env, "mlflow") and not probe(env, "ray")
    wheels = tmp_path / "wheels"
    first = [sys.executable, "-m", "benchmarks.gpu_run", "all", "--data", str(tanaka_dataset), "--out-dir",
             str(out), "--test", str(test), "--wheels", str(wheels)]
    # without the carried wheels: one line, in seconds, before any training
    bare = subprocess.run(first, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert bare.returncode != 0 and not (out / "loop.json").exists()
    assert bare.stderr.strip().splitlines()[-1].startswith("gpu_run: cannot run here: sacremoses does not import")
    # carry: the wheels, the test pair at the study's --test and the dataset prepared, so the defaults run there
    carry = [sys.executable, "-m", "benchmarks.gpu_run", "carry", "--wheels", str(wheels), "--test",
             str(tmp_path / "carried" / "test"), "--data", str(tmp_path / "prepared"), "--tanaka"]
    nowhere = subprocess.run([*carry, str(tmp_path / "nowhere")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert nowhere.returncode != 0 and nowhere.stderr.strip().splitlines()[-1].startswith(
        f"gpu_run carry: no Tanaka test pair in {tmp_path / 'nowhere'}")
    carried = subprocess.run([*carry, str(tanaka)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert carried.returncode == 0, carried.stderr[-3000:]
    assert [p.name.split("-")[0] for p in wheels.glob("*.whl")] == ["sacremoses"]
    assert all((tmp_path / "carried" / f"test.{lang}.conllu.gz").read_bytes() ==
               (tanaka / f"test.{lang}.conllu.gz").read_bytes() for lang in ("ja", "en"))
    metas = [json.loads((path / "meta.json").read_text()) for path in (tmp_path / "prepared", tanaka_dataset)]
    assert [[meta[key] for key in ("inputs_sha256", "vocab_size")] for meta in metas] == [
        [metas[1]["inputs_sha256"], metas[1]["vocab_size"]]] * 2
    assert carried.stdout.strip().endswith(f"{wheels} {tmp_path / 'carried'} {tmp_path / 'prepared'}")
    missing = subprocess.run([*first[:5], str(tmp_path / "nowhere"), *first[6:]], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
    assert missing.stderr.strip().splitlines()[-1] == (f"gpu_run: cannot run here: no prepared dataset at "
                                                       f"{tmp_path / 'nowhere'} (no meta.json)")
    run = subprocess.run([sys.executable, "-m", "benchmarks.gpu_run", "all", "--data", str(tanaka_dataset),
                          "--out-dir", str(out), "--work", str(tmp_path / "work"), "--test", str(test),
                          "--warmup", "1", "--updates", "1", "--profile", "1", "--max-tokens", "256",
                          "--plan", "deguchi2019/baseline:off+deterministic,reference:off",
                          "--rows", "deguchi2019/baseline", "omote2019/dep+rel",
                          "--seeds", "1", "--headline-seeds", "1", "--results-dir", str(tmp_path / "none"),
                          "--max-updates", "4", "--epoch-updates", "2", "--minutes", "8",
                          "--loop-minutes", "3", "--min-run-s", "5", "--wheels", str(wheels), "--commit", "abc1234"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    loop = json.loads((out / "loop.json").read_text())
    # the platform's baseline (in deterministic mode), then torch.nn.Transformer in the same call
    baseline, reference = loop["runs"]
    assert baseline["deterministic"] and len(baseline["losses_digest"]) == 12
    assert baseline["row"] == "deguchi2019/baseline" and baseline["mfu"] > 0 and baseline["tokens_per_update"] > 0
    # the host's update, phase by phase (where a GPU idles), from the profiled update
    host = baseline["profile"]["host_ms_per_update"]
    assert list(host) == ["to device", "loss and backward", "clip", "wait for the device", "optimizer step",
                          "the loop's own"], host
    # each phase's range was recorded (which phase takes longer is the device's to show: on a
    # preempted CPU one profiled update's optimizer step can outlast its backward)
    assert all(ms >= 0 for ms in host.values()) and host["loss and backward"] > 0 and host["optimizer step"] > 0
    assert sum(host.values()) == pytest.approx(baseline["profile"]["wall_ms_per_update"], rel=0.01) or (
        host["the loop's own"] == 0)
    assert reference["row"] == "reference" and reference["model"] == "torch.nn.Transformer"
    assert reference["tokens_per_s"] > 0 and reference["tokens_per_update"] > 0
    study = json.loads((out / "study.json").read_text())
    assert not [r for r in study["runs"] if "failed" in r], study["runs"]
    kinds = {r["row"]: set(r["tests"]) for r in study["runs"]}
    assert kinds == {"deguchi2019/baseline": {"test", "test_avg2", "test_as_omote2019-baseline"},
                     "omote2019/dep+rel": {"test", "test_avg2", "test_as_deguchi2019-baseline"}}  # also beam 4
    # the run's results file, what goes into benchmarks/gpu_results/: the machine, the commit, the command, all
    (written,) = out.glob("*.json.gz")
    record = json.loads(gzip.decompress(written.read_bytes()))
    assert record["loop"] == loop and record["study"] == study and record["meta"]["device"] == "cpu"
    assert record["meta"]["commit"] == "abc1234"
    assert record["meta"]["command"].startswith("python -m benchmarks.gpu_run all")
    assert written.name == f"{record['meta']['date']}-cpu-abc1234.json.gz"
    # results accumulate: an earlier run's outputs recorded as a second file, and the docs built from both
    kept = tmp_path / "gpu_results"
    kept.mkdir()
    (kept / written.name).write_bytes(written.read_bytes())
    # (as seed 2, a seed trained twice is pooled once; its test BLEU a point lower: two runs of a row that score
    # alike leave no seed variance to test)
    copy = tmp_path / "earlier"
    copy.mkdir()
    for name in ("meta.json", "loop.json"):
        (copy / name).write_bytes((out / name).read_bytes())
    lower = json.loads((out / "study.json").read_text())
    for run in lower["runs"]:
        run["seed"] = 2
        run["tests"]["test"]["metrics"]["test_bleu"] -= 1.0
    (copy / "study.json").write_text(json.dumps(lower))
    earlier = subprocess.run([sys.executable, "-m", "benchmarks.gpu_run", "record", "--from", str(copy), "--commit",
                              "0000000", "--command", "python -m benchmarks.gpu_run all", "--date", "20260101-0000",
                              "--to", str(kept)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert earlier.returncode == 0, earlier.stderr[-3000:]
    # and a GPU's study of the same seed (this one's, relabelled): the two devices are never pooled
    from benchmarks import gpu_results

    gpu_results.write(kept, {**record["meta"], "device": "NVIDIA H100 80GB HBM3", "date": "20260102-0000"}, loop,
                      study)
    # and CPU studies at two converged budgets (early stopping): tabled in a section of their own,
    # never pooled with the fixed budget's or with each other, the newest budget first
    gpu_results.write(kept, {**record["meta"], "date": "20260103-0000"}, None, {**study, "patience": 2})
    gpu_results.write(kept, {**record["meta"], "date": "20260104-0000"}, None, {**study, "patience": 3,
                                                                                "runs": study["runs"][:1]})
    # and a GPU's study at the first of them: the two devices are set side by side at that budget only
    gpu_results.write(kept, {**record["meta"], "device": "NVIDIA H100 80GB HBM3", "date": "20260105-0000"}, None,
                      {**study, "patience": 2})
    results, performance, cluster = tmp_path / "results.md", tmp_path / "performance.md", tmp_path / "cluster.md"
    results.write_text("# Results\n\nwritten by hand, kept\n")
    performance.write_text("# Performance\n")
    cluster.write_text("# Cluster\n")
    table = subprocess.run([sys.executable, "-m", "benchmarks.gpu_run", "table", "--results", str(kept),
                            "--out", str(results), "--performance", str(performance), "--cluster", str(cluster)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert table.returncode == 0, table.stderr[-3000:]
    # what an afternoon buys, from the newest GPU run's fastest measured baseline setting (the CPU's loops are no
    # GPU rate), no syntax row measured there
    (line,) = [line for line in cluster.read_text().splitlines() if "target tokens/s a GPU" in line]
    assert (f"| {baseline['tokens_per_s']:,.0f} target tokens/s a GPU, paper size, for the baseline (no syntax row "
            f"measured: each at this rate) | NVIDIA H100 80GB HBM3, torch") in line
    measured = performance.read_text()
    loop_rows = [line.split(" | ") for line in measured.splitlines() if line.startswith("| cpu, ")]
    assert [row[:3] for row in loop_rows] == [
        ["| cpu, 0000000", "`deguchi2019/baseline`", "`off+deterministic`"], ["| cpu, 0000000", "`reference`", "`off`"],
        ["| cpu, abc1234", "`deguchi2019/baseline`", "`off+deterministic`"], ["| cpu, abc1234", "`reference`", "`off`"]]
    assert loop_rows[0][-1] == f"{baseline['losses_digest']} |"  # the digest a rerun's must equal
    ratio = baseline["tokens_per_s"] / reference["tokens_per_s"]
    assert loop_rows[0][6] == f"{ratio:.2f}×" and loop_rows[1][6] == "1.00×"  # × the same call's reference
    text = results.read_text()
    assert "### At most 4 updates, dev BLEU every 2\n\n2 CPU results file(s) pooled, a call each: " in text
    # each row's runs and seed numbers; the CPU's line names the headline rows it has not run too
    assert ("trains what is missing): deguchi2019/baseline 2/5 (seeds 2, 1), deguchi2019/enc+dec 0/5, omote2019/rel "
            "0/5, omote2019/dep+rel 2/5 (seeds 2, 1).") in text
    assert "1 GPU results file(s) pooled" in text
    converged = text[text.index("<!-- CPU_CONVERGED_BEGIN"):text.index("<!-- CPU_CONVERGED_END -->")]
    blocks = converged.split("\n### ")[1:]
    assert ["#### The two devices" in block for block in blocks] == [False, True]  # the GPU ran at patience 2
    assert [block.split("\n")[0] for block in blocks] == [
        f"At most 4 updates, dev BLEU every 2, a run stopped after {patience} validations without a better dev BLEU"
        for patience in (3, 2)]
    for block, rows in zip(blocks, (["deguchi2019/baseline"], ["deguchi2019/baseline", "omote2019/dep+rel"])):
        assert block.count("results file(s) pooled") == 1 and "(a run stopped early counts up to" in block
        curves = block.split("#### Dev BLEU")[1].split("#### The two devices")[0]
        assert [line.split(" | ")[0] for line in curves.splitlines()
                if line.startswith(("| deguchi2019/", "| omote2019/"))] == [f"| {row}" for row in rows]
        assert "| deguchi2019/baseline | 1 |" in block
    assert text.startswith("# Results\n\nwritten by hand, kept\n")
    gpu = text[text.index("<!-- GPU_STUDY_BEGIN"):text.index("<!-- GPU_STUDY_END -->")]
    assert "| deguchi2019/baseline | 1 |" in gpu and "CPU run" not in gpu
    section = text[text.index("<!-- CPU_RUNS_BEGIN"):text.index("<!-- CPU_RUNS_END -->")]
    assert section.index("commit 0000000 (20260101-0000)") < section.index("commit abc1234")  # the files in order
    # the devices side by side: 2 CPU runs and 1 GPU run of each row, seed 1 on both (the same outputs here)
    devices = section[section.index("#### The two devices"):]
    assert [line.split(" | ")[:2] + line.split(" | ")[3:4] + line.split(" | ")[-1:] for line in devices.splitlines()
            if line.startswith("| deguchi2019/") or line.startswith("| omote2019/")] == [
        ["| deguchi2019/baseline", "2", "1", "s1 +0.00 |"], ["| omote2019/baseline", "2", "1", "s1 +0.00 |"],
        ["| omote2019/dep+rel", "2", "1", "s1 +0.00 |"]]
    section = section[:section.index("#### The two devices")]
    # how fast each row learns: its dev BLEU at each validation, the mean over its runs (two copies of one here)
    curves = section[section.index("#### Dev BLEU by update (mean over runs)"):]
    section = section[:section.index("#### Dev BLEU by update")]
    assert {line.split(" | ")[0].strip("| "): line.strip(" |").split(" | ")[1:] for line in curves.splitlines()
            if line.startswith(("| deguchi2019/", "| omote2019/"))} == {
        run["row"]: [f"{report['dev_bleu']:.2f}" for report in run["history"] if "dev_bleu" in report]
        for run in study["runs"]}
    rows = [line for line in section.splitlines() if line.startswith("| omote2019/")]
    beam = "as deguchi2019/baseline decodes"  # Omote's table again, every row decoded with beam 4, α 0.6
    assert [row.split(" | ")[0] for row in rows] == ["| omote2019/baseline (the deguchi2019/baseline runs)",
                                                     "| omote2019/dep+rel",
                                                     f"| omote2019/baseline {beam} (the deguchi2019/baseline runs)",
                                                     f"| omote2019/dep+rel {beam}"]
    assert [row.split(" | ")[2] for row in rows] == ["greedy", "greedy", "beam 4, α 0.6", "beam 4, α 0.6"]
    header = next(line for line in section.splitlines() if line.startswith("| row"))
    column = [cell.strip("| ") for cell in header.split(" | ")].index("BLEU p (bs)")
    assert rows[1].split(" | ")[column] != "–"  # dep+rel against the baseline decoded greedily
    cells = [cell.strip("| ") for cell in header.split(" | ")]
    assert rows[1].split(" | ")[cells.index("seeds")] == "2"  # one seed from each CPU run
    assert rows[1].split(" | ")[cells.index("p (seeds)")] != "–"  # two a side: the seed-level test is there
    assert rows[3].split(" | ")[cells.index("p (seeds)")] != "–"  # and decoded with beam 4
    assert rows[2].split(" | ")[cells.index("test BLEU")] == next(  # the baseline's own (Deguchi's) decoding
        line for line in section.splitlines() if line.startswith("| deguchi2019/baseline")).split(" | ")[
        cells.index("test BLEU")]
    assert [line.split(" | ")[0] for line in section.splitlines() if line.startswith("| deguchi2019/")] == [
        "| deguchi2019/baseline"]  # Deguchi's table: the baseline alone, as the CPU study shows a row that ran


def test_a_gpu_call_trains_what_the_results_files_lack_each_run_with_its_baseline_at_its_seed(tmp_path):
    """Seeds accumulate over GPU calls: each trains the runs its rows lack of their targets (5 for
    the headline rows, 3 for the others), new seed numbers after every seed a results file of its
    device (GPU or CPU, ``GPU_RUN_DEVICE=cpu``) has,
    each run with its table's baseline at the same seed (without it under --unpaired), headline rows
    first, at most --max-runs."""
    from types import SimpleNamespace

    from benchmarks import gpu_results, gpu_run, study

    budget = SimpleNamespace(max_updates=2000, epoch_updates=250)
    earlier = {"max_updates": 2000, "epoch_updates": 250, "wall_s": 60.0,
               "runs": [{"row": row, "seed": seed} for row in study.STUDY_ROWS for seed in (1, 2, 3)]}
    other_budget = {**earlier, "max_updates": 500, "runs": [{"row": "deguchi2019/enc", "seed": 9}]}
    gpu_results.write(tmp_path, {"date": "20260101-0000", "device": "H100"}, None, earlier)
    gpu_results.write(tmp_path, {"date": "20260102-0000", "device": "H100"}, None, other_budget)
    converged = {**earlier, "patience": 3, "runs": [{"row": "omote2019/rel", "seed": 7}]}  # early stopping
    gpu_results.write(tmp_path, {"date": "20260103-0000", "device": "H100"}, None, converged)
    gpu_results.write(tmp_path, {"date": "20260104-0000", "device": "H100"}, {"runs": []}, None)  # a loop alone
    on_the_cpu = {**earlier, "runs": [{"row": "deguchi2019/enc+dec", "seed": 1}, {"row": "omote2019/rel", "seed": 5}]}
    gpu_results.write(tmp_path, {"date": "20260105-0000", "device": "cpu"}, None, on_the_cpu)  # GPU_RUN_DEVICE=cpu
    again = {**earlier, "runs": [{"row": "deguchi2019/baseline", "seed": 1}]}  # a seed trained twice: one run
    gpu_results.write(tmp_path, {"date": "20260106-0000", "device": "H100"}, None, again)
    trained, first, seeds = gpu_run.trained_so_far(tmp_path, budget)
    assert trained == {row: 3 for row in study.STUDY_ROWS} and first == 4  # not the other budgets' or the CPU's
    assert seeds == {row: {1, 2, 3} for row in study.STUDY_ROWS}
    assert gpu_run.trained_so_far(tmp_path, budget, "cpu") == (
        {"deguchi2019/enc+dec": 1, "omote2019/rel": 1}, 6, {"deguchi2019/enc+dec": {1}, "omote2019/rel": {5}})
    patience = SimpleNamespace(**vars(budget), patience=3)
    assert gpu_run.trained_so_far(tmp_path, patience)[:2] == ({"omote2019/rel": 1}, 8)
    shared = study.decoded_as(gpu_run.study_args(budget))
    rows = [row for row in study.ROWS if row not in shared]
    targets = gpu_run.seed_targets(rows, 3, 5)
    plan = gpu_run.study_plan(targets, trained, first, 16, shared)
    assert len(plan) == len(set(plan)) == 16 and min(seed for _, seed in plan) == 4
    assert all((gpu_run.baseline_of(row, shared), seed) in plan for row, seed in plan)
    assert [row for row, _ in plan[:4]] == list(gpu_run.HEADLINE_ROWS)  # the headline rows first
    whole = gpu_run.study_plan(targets, trained, first, 1000, shared)  # no cap: every target met
    assert all(trained.get(row, 0) + sum(r == row for r, _ in whole) >= targets[row] for row in rows)
    assert sum(r == "omote2019/dep+rel" for r, _ in whole) == 2  # 3 in the results, 5 wanted
    omote = {"omote2019/rel": 5, "omote2019/dep+rel": 5}  # the baseline's runs at this budget suffice
    assert gpu_run.study_plan(omote, {}, 3, 2, shared, paired=False) == [("omote2019/rel", 3), ("omote2019/dep+rel", 3)]
    assert gpu_run.study_plan(omote, {}, 3, 2, shared) == [("deguchi2019/baseline", 3), ("omote2019/rel", 3)]
    # unpaired, a row takes the baseline's seeds it lacks first (its paired tests find the baseline's run)
    had = {"deguchi2019/baseline": {3, 4, 5}, "omote2019/rel": {3, 4}, "omote2019/dep+rel": {3}}
    counts = {row: len(seeds) for row, seeds in had.items()}
    assert gpu_run.study_plan(omote, counts, 6, 4, shared, paired=False, seeds=had) == [
        ("omote2019/dep+rel", 4), ("omote2019/rel", 5), ("omote2019/dep+rel", 5), ("omote2019/rel", 6)]
    assert gpu_run.study_plan(omote, counts, 6, 2, shared, seeds=had) == [  # paired: new seeds, as before
        ("deguchi2019/baseline", 6), ("omote2019/rel", 6)]


def test_the_loop_measures_the_compiled_syntax_rows_and_the_larger_batches_before_the_rest():
    """The loop's plan, run by run, the decisive measurements first: the baseline and reference,
    the syntax rows in the baseline's best compiled mode, the larger batches there; then
    ``dep+rel`` eager and deterministic twice (cost, and whether the losses repeat), the syntax rows
    eager; settings parse to the config they change."""
    from benchmarks import gpu_run

    results: list[dict] = []
    while (step := gpu_run.loop_plan(results)) is not None:
        row, setting = step
        mfu = {("deguchi2019/baseline", "reduce-overhead"): 0.06, ("deguchi2019/baseline", "default"): 0.05}
        results.append({"row": row, "compile": setting, "mfu": mfu.get(step, 0.04)})
    steps = [(r["row"], r["compile"]) for r in results]
    assert steps[:8] == [("deguchi2019/baseline", "off"), ("deguchi2019/baseline", "reduce-overhead"),
                         ("reference", "default"), ("deguchi2019/enc+dec", "reduce-overhead"),
                         ("omote2019/rel", "reduce-overhead"), ("omote2019/dep+rel", "reduce-overhead"),
                         ("deguchi2019/baseline", "reduce-overhead@32768"),
                         ("deguchi2019/baseline", "reduce-overhead@65536")]
    assert steps[8:12] == [("omote2019/dep+rel", "off"), ("omote2019/dep+rel", "off+deterministic"),
                           ("omote2019/dep+rel", "off+deterministic#2"), ("omote2019/dep+rel",
                                                                          "reduce-overhead+deterministic")]
    assert steps[-1] == ("deguchi2019/baseline", "default")
    assert len(steps) == len(set(steps))
    assert gpu_run.parse_setting("reduce-overhead+deterministic@32768#2") == (
        "reduce-overhead", {"deterministic": True, "batching.max_tokens": 32768})
    assert gpu_run.parse_setting("off") == ("off", {})
    with pytest.raises(SystemExit, match="bad loop setting"):
        gpu_run.parse_setting("off+fast")


def test_a_seed_trained_twice_at_one_budget_is_pooled_once_from_its_latest_file(tmp_path):
    """Two results files of one device and budget with the same (row, seed): the later file's run
    stands for it, the earlier one's goes (a file left without a run with it); another budget's
    or device's same seed is not touched."""
    from benchmarks import gpu_results

    def study_of(runs, **budget):
        return {"max_updates": 2000, "epoch_updates": 250, "wall_s": 60.0, **budget,
                "runs": [{"row": row, "seed": seed, "tests": {"test": {"metrics": {"test_bleu": bleu}}}}
                         for row, seed, bleu in runs]}

    gpu_results.write(tmp_path, {"date": "20260101-0000", "device": "cpu"}, None,
                      study_of([("deguchi2019/baseline", 1, 20.0), ("deguchi2019/enc+dec", 1, 18.0)]))
    gpu_results.write(tmp_path, {"date": "20260102-0000", "device": "cpu"}, None,
                      study_of([("deguchi2019/baseline", 1, 21.0), ("deguchi2019/baseline", 2, 22.0)]))
    gpu_results.write(tmp_path, {"date": "20260103-0000", "device": "cpu"}, None,
                      study_of([("deguchi2019/enc+dec", 1, 19.0)]))
    gpu_results.write(tmp_path, {"date": "20260104-0000", "device": "cpu"}, None,
                      study_of([("deguchi2019/baseline", 1, 25.0)], max_updates=500))
    gpu_results.write(tmp_path, {"date": "20260105-0000", "device": "H100"}, None,
                      study_of([("deguchi2019/baseline", 1, 26.0)]))
    results = gpu_results.read_all([tmp_path])
    (other, fixed) = gpu_results.pooled_budgets(results, "cpu")  # the budget first run most recently first
    pooled = {(run["row"], run["seed"]): (result["meta"]["date"], run["tests"]["test"]["metrics"]["test_bleu"])
              for result in fixed for run in result["study"]["runs"]}
    assert pooled == {("deguchi2019/baseline", 1): ("20260102-0000", 21.0),
                      ("deguchi2019/baseline", 2): ("20260102-0000", 22.0),
                      ("deguchi2019/enc+dec", 1): ("20260103-0000", 19.0)}
    assert [result["meta"]["date"] for result in fixed] == ["20260102-0000", "20260103-0000"]  # the first: none left
    assert [len(result["study"]["runs"]) for result in other] == [1]
    (gpu,) = gpu_results.pooled_budgets(results, "gpu")
    assert gpu[0]["study"]["runs"][0]["tests"]["test"]["metrics"]["test_bleu"] == 26.0


def test_a_gpu_call_plans_as_many_runs_as_its_minutes_hold_at_the_paces_earlier_calls_measured(tmp_path):
    """A run the deadline cuts short is lost: the plan stops where the measured paces (seconds
    per update, slowed in proportion past the runs at once they were measured among) say the
    next round would not end in time; an unmeasured row is taken at twice the slowest pace."""
    from types import SimpleNamespace

    from benchmarks import gpu_results, gpu_run, study

    def run(row: str, seed: int, wall_s: float) -> dict:
        return {"row": row, "seed": seed, "wall_s": wall_s, "history": [{"step": 2000}]}

    # the first GPU call's shape: 3 rows x 3 seeds at once, about 2 minutes for 2,000 updates each
    runs = [run(row, seed, 120.0) for row in study.STUDY_ROWS for seed in (1, 2, 3)]
    gpu_results.write(tmp_path, {"date": "20260101-0000", "device": "H100"}, None,
                      {"max_updates": 2000, "epoch_updates": 250, "wall_s": 130.0, "runs": runs})
    on_the_cpu = [run("omote2019/rel", 1, 9e3)]  # another device's pace: not used
    gpu_results.write(tmp_path, {"date": "20260102-0000", "device": "cpu"}, None,
                      {"max_updates": 2000, "epoch_updates": 250, "wall_s": 9e3, "runs": on_the_cpu})
    rates = gpu_run.run_rates(tmp_path, "gpu")
    assert rates == {row: (0.06, 9) for row in study.STUDY_ROWS}
    fits = gpu_run.call_fits(rates, 8000, 480.0)  # a 9-minute call less its margin, at a cap of 8,000 updates
    baseline = [("deguchi2019/baseline", seed) for seed in range(10)]
    assert fits(baseline[:9]) and not fits(baseline[:10])  # 480 s each at 9 at once; 10 share the device more
    assert not fits([("omote2019/rel", 1)])  # never measured: 0.12 s an update, 960 s
    assert gpu_run.call_fits(rates, 2000, 480.0)([("omote2019/rel", 1)] * 16)  # 2,000 updates: 427 s
    shared = study.decoded_as(gpu_run.study_args(SimpleNamespace(max_updates=8000, epoch_updates=250)))
    rows = [row for row in study.ROWS if row not in shared]
    plan = gpu_run.study_plan(gpu_run.seed_targets(rows, 3, 5), {}, 1, 16, shared, fits=fits)
    # the measured rows, 9 at once; omote2019/rel (with its baseline) and the rows never run on the GPU left out
    assert plan == [(row, seed) for seed in (1, 2, 3) for row in study.STUDY_ROWS]
    assert gpu_run.call_fits({}, 8000, 1.0)(baseline)  # nothing measured on the device: --max-runs alone


def test_the_profiled_wall_spans_exactly_the_profiled_updates():
    """The loop's progress stamps, one at each update's end (update i + 1 at index i): the
    profiler runs from update warmup + updates to the run's last, ``profile`` updates later."""
    from benchmarks import gpu_run

    warmup, updates, profile = 45, 60, 3
    stamps = [(step, float(step) * 0.05, 0.0, 0.0) for step in range(1, warmup + updates + profile + 1)]
    window = gpu_run.profiled_stamps(stamps, warmup + updates, profile)
    assert [stamp[0] for stamp in window] == [105, 106, 107, 108]  # 4 stamps, 3 intervals
    assert (window[-1][1] - window[0][1]) / profile == pytest.approx(0.05)  # the update's wall, not 2/3 of it


def test_a_workers_stray_output_fails_its_run_only(tmp_path):
    """A loop worker's result is the JSON object on its last line, a study run's its result file;
    a library's stray line after it, no output at all, or a file cut short, is that run's failure
    (recorded), not an exception that loses the call."""
    from benchmarks import gpu_run

    written = gpu_run.run_result(tmp_path, "omote2019/dep+rel", 3)
    assert written.name == "omote2019-dep-rel-s3.json" and gpu_run.read_result(written) is None  # none written
    gpu_run.write_json(written, {"row": "omote2019/dep+rel", "tests": {"test": {"hyp": ["a"] * 9000}}})
    assert gpu_run.read_result(written)["row"] == "omote2019/dep+rel"
    written.write_text(written.read_text()[:65536])  # what a pipe's buffer held of it
    assert gpu_run.read_result(written) is None

    assert gpu_run.last_json('warming up\n{"row": "r", "tokens_per_s": 1.0}\n') == {"row": "r", "tokens_per_s": 1.0}
    assert gpu_run.last_json('{"row": "r"}\nW1201 a library warns\n') is None
    assert gpu_run.last_json("") is None and gpu_run.last_json("[1, 2]") is None


def test_an_afternoon_prices_each_syntax_row_at_its_own_measured_share_of_the_baseline():
    from benchmarks import gpu_results

    def entry(row: str, mode: str, rate: float) -> dict:
        return {"row": row, "compile": mode, "tokens_per_s": rate}

    result = {"meta": {"device": "NVIDIA H100 80GB HBM3", "date": "20260101-0000"}, "name": "a.json.gz",
              "loop": {"runs": [entry("deguchi2019/baseline", "off", 100.0),
                                entry("deguchi2019/baseline", "reduce-overhead", 150.0),
                                entry("omote2019/dep+rel", "off", 86.0),
                                entry("omote2019/dep+rel", "reduce-overhead", 60.0),
                                entry("omote2019/rel", "reduce-overhead", 120.0),
                                entry("deguchi2019/enc+dec", "reduce-overhead@32768", 300.0)]}}
    shares = gpu_results.row_shares(result)
    assert shares == {"omote2019/dep+rel": pytest.approx(0.86), "omote2019/rel": pytest.approx(0.8)}  # eager first
    priced = gpu_results.afternoon([result])
    assert "150 target tokens/s a GPU, paper size, for the baseline (the syntax rows at `dep+rel` 0.86×, `rel` " \
           "0.80× of it)" in priced
    # enc+dec only at another batch: the DBSA rows at the slowest measured share (0.80), the rest at theirs
    hours = 3 * 3e6 * 30 / 150 / 3600 * (20 * (1 + 3 / 0.8) + 30 * (1 + 1 / 0.8 + 2 / 0.86))
    assert f"| {hours:,.0f} GPU-hours, {hours / 4:,.0f} h on 4 GPUs |" in priced
    cpu = {**result, "meta": {**result["meta"], "device": "cpu"}}
    assert gpu_results.afternoon([cpu]).startswith("No GPU run has measured")  # a CPU's loop is no GPU rate
