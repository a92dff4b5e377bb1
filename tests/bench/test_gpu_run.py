"""benchmarks/gpu_run.py runs where a GPU is lent only now and then, with minutes to spare: its
dry run on the CPU (``GPU_RUN_DEVICE=cpu``, tiny budgets) goes through every stage a GPU run
does, on the real Tanaka data, and its table lands in a results file."""

import gzip
import json
import os
import subprocess
import sys

import pytest
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
    env = {**os.environ, "GPU_RUN_DEVICE": "cpu"}
    run = subprocess.run([sys.executable, "-m", "benchmarks.gpu_run", "all", "--data", str(tanaka_dataset),
                          "--out-dir", str(out), "--work", str(tmp_path / "work"), "--test", str(test),
                          "--warmup", "1", "--updates", "1", "--profile", "1", "--max-tokens", "256",
                          "--plan", "deguchi2019/baseline:off", "--rows", "deguchi2019/baseline", "omote2019/dep+rel",
                          "--seeds", "1", "--max-updates", "4", "--epoch-updates", "2", "--minutes", "8",
                          "--loop-minutes", "3", "--min-run-s", "5"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    loop = json.loads((out / "loop.json").read_text())
    (baseline,) = loop["runs"]
    assert baseline["row"] == "deguchi2019/baseline" and baseline["mfu"] > 0 and baseline["tokens_per_update"] > 0
    study = json.loads((out / "study.json").read_text())
    assert not [r for r in study["runs"] if "failed" in r], study["runs"]
    kinds = {r["row"]: set(r["tests"]) for r in study["runs"]}
    assert kinds == {"deguchi2019/baseline": {"test", "test_avg2", "test_as_omote2019-baseline"},
                     "omote2019/dep+rel": {"test", "test_avg2"}}
    results = tmp_path / "results.md"
    results.write_text("# Results\n\nwritten by hand, kept\n")
    table = subprocess.run([sys.executable, "-m", "benchmarks.gpu_run", "table", "--results", str(out / "study.json"),
                            "--out", str(results)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert table.returncode == 0, table.stderr[-3000:]
    text = results.read_text()
    assert text.startswith("# Results\n\nwritten by hand, kept\n")
    section = text[text.index("<!-- GPU_STUDY_BEGIN"):text.index("<!-- GPU_STUDY_END -->")]
    rows = [line for line in section.splitlines() if line.startswith("| omote2019/")]
    assert [row.split(" | ")[0] for row in rows] == ["| omote2019/baseline (the deguchi2019/baseline runs)",
                                                     "| omote2019/dep+rel"]
    header = next(line for line in section.splitlines() if line.startswith("| row"))
    column = [cell.strip("| ") for cell in header.split(" | ")].index("BLEU p (bs)")
    assert rows[1].split(" | ")[column] != "–"  # dep+rel against the baseline decoded greedily (one seed: no seed p)
    assert [line.split(" | ")[0] for line in section.splitlines() if line.startswith("| deguchi2019/")] == [
        "| deguchi2019/baseline"]  # Deguchi's table: the baseline alone, as the CPU study shows a row that ran
