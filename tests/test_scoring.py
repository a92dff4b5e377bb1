"""``platform.evaluate --hyp/--ref``: plain-text output scored exactly as sacreBLEU's own command
line scores the same files (13a for English, ja-mecab for Japanese, the paired tests of
``--compare``), on the real Tanaka test sentences; bad input is one line, exit 2, nothing written."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import require_module, run_in_process

from platform import evaluate


def sacrebleu_cli(*args: str) -> str:
    """sacreBLEU's own command line (its ``-f text`` output)."""
    executable = shutil.which("sacrebleu", path=str(Path(sys.executable).parent))
    result = subprocess.run([executable, *args, "-w", "4", "-f", "text"], capture_output=True, text=True, timeout=120,
                            env={"SACREBLEU_SEED": "12345", "PATH": str(Path(sys.executable).parent)})
    assert result.returncode == 0, result.stderr
    return result.stdout


def cli_scores(output: str) -> list[float]:
    """BLEU and chrF of one system (``-m bleu chrf -f text``: ``BLEU|nrefs:1|... = 21.3 ...``)."""
    return [float(re.search(rf"^ *{metric}\|\S* = ([0-9.]+)", output, re.MULTILINE).group(1))
            for metric in ("BLEU", "chrF2")]


def damaged(lines: list[str], every: int, cut: int) -> list[str]:
    """A worse system: every ``every``-th line loses its last ``cut`` characters."""
    return [line[:-cut] if i % every == 0 and len(line) > cut else line for i, line in enumerate(lines)]


@pytest.fixture
def files(tanaka, tmp_path):
    """The real Tanaka test references (English and Japanese, plain text) and two damaged systems."""
    made = {}
    for lang in ("en", "ja"):
        ref = (tanaka / f"test.{lang}").read_text(encoding="utf-8").splitlines()[:300]
        for name, lines in (("ref", ref), ("a", damaged(ref, 2, 6)), ("b", damaged(ref, 3, 6))):
            made[f"{name}.{lang}"] = tmp_path / f"{name}.{lang}"
            made[f"{name}.{lang}"].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return made


@pytest.mark.parametrize("lang, tokenize", [("en", "13a"), ("ja", "ja-mecab")])
def test_plain_text_scores_are_sacrebleus_own(files, lang, tokenize, tmp_path, capsys):
    if tokenize == "ja-mecab":
        require_module("MeCab", "ja-mecab needs the ja extra (sacrebleu[ja]), which dev installs")
    hyp, ref = files[f"a.{lang}"], files[f"ref.{lang}"]
    result = run_in_process(evaluate.main, ["--hyp", hyp, "--ref", ref, "--tgt", lang, "--tokenize", tokenize,
                                            "--out", tmp_path / "scores"], capsys)
    assert result.returncode == 0, result.stderr
    mine = evaluate_json(result.stdout)
    expected = cli_scores(sacrebleu_cli(str(ref), "-i", str(hyp), "-m", "bleu", "chrf", "--tokenize", tokenize))
    assert [mine["bleu"], mine["chrf"]] == pytest.approx(expected, abs=1e-4) and mine["sentences"] == 300
    assert f"tok:{tokenize}" in result.stderr  # the signature
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # this venv's sacrebleu
    script = subprocess.run(["sh", str(tmp_path / "scores.sacrebleu.sh")], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PATH": path})
    assert f"{mine['bleu']:.4f}" in script.stdout  # the written script recomputes it


def test_chrf_plus_plus_and_ter_against_two_references_are_sacrebleus_own(files, tmp_path, capsys):
    """``--metrics bleu,chrf,chrf++,ter`` and ``--ref`` twice: the scores sacreBLEU's command line
    gives for the same files with both references, and the written script recomputes them."""
    hyp, ref, second = files["a.en"], files["ref.en"], files["b.en"]  # b: a second, different reference
    result = run_in_process(evaluate.main, ["--hyp", hyp, "--ref", ref, "--ref", second, "--tgt", "en",
                                            "--metrics", "bleu,chrf,chrf++,ter", "--out", tmp_path / "multi"], capsys)
    assert result.returncode == 0, result.stderr
    mine = evaluate_json(result.stdout)
    assert mine["references"] == 2 and mine["sentences"] == 300
    plain = sacrebleu_cli(str(ref), str(second), "-i", str(hyp), "-m", "bleu", "chrf", "ter", "--tokenize", "13a")
    plus = sacrebleu_cli(str(ref), str(second), "-i", str(hyp), "-m", "chrf", "--chrf-word-order", "2")
    expected = {name: float(re.search(rf"^ *{metric}\|nrefs:2\|\S* = ([0-9.]+)", text, re.MULTILINE).group(1))
                for name, metric, text in (("bleu", "BLEU", plain), ("chrf", "chrF2", plain),
                                           ("ter", "TER", plain), ("chrf++", r"chrF2\+\+", plus))}
    assert {name: mine[name] for name in expected} == pytest.approx(expected, abs=1e-4)
    one = evaluate_json(run_in_process(evaluate.main, ["--hyp", hyp, "--ref", ref, "--tgt", "en", "--out",
                                                       tmp_path / "one"], capsys).stdout)
    assert mine["bleu"] > one["bleu"] and set(one) == {"bleu", "chrf", "sentences", "references"}  # the default pair
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    script = subprocess.run(["sh", str(tmp_path / "multi.sacrebleu.sh")], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PATH": path})
    assert all(f"{mine[name]:.4f}" in script.stdout for name in expected), script.stdout
    refused = run_in_process(evaluate.main, ["--hyp", hyp, "--ref", ref, "--metrics", "bleu,meteor"], capsys)
    assert refused.returncode == 2 and "--metrics bleu,meteor: a comma-separated list of bleu, chrf, chrf++, ter" \
        in refused.stderr


def evaluate_json(stdout: str) -> dict:
    import json

    return json.loads(stdout)


def test_the_japanese_default_is_the_platforms_char_and_an_empty_hypothesis_line_is_scored(files, tmp_path,
                                                                                           capsys):
    hyp = tmp_path / "with-empty.ja"
    lines = files["a.ja"].read_text(encoding="utf-8").splitlines()
    hyp.write_text("".join(line + "\n" for line in ["", *lines[1:]]), encoding="utf-8")  # nothing for line 1
    result = run_in_process(evaluate.main, ["--hyp", hyp, "--ref", files["ref.ja"], "--tgt", "ja",
                                            "--out", tmp_path / "s"], capsys)
    assert result.returncode == 0 and "tok:char" in result.stderr
    expected = cli_scores(sacrebleu_cli(str(files["ref.ja"]), "-i", str(hyp), "-m", "bleu", "chrf",
                                        "--tokenize", "char"))
    assert [evaluate_json(result.stdout)[k] for k in ("bleu", "chrf")] == pytest.approx(expected, abs=1e-4)


def test_compare_gives_sacrebleus_paired_bootstrap_and_randomisation_p(files, tmp_path, capsys):
    # b is damaged on every 3rd line, a on every 2nd: b is the better system
    ref, a, b = files["ref.en"], files["a.en"], files["b.en"]
    result = run_in_process(evaluate.main, ["--hyp", b, "--ref", ref, "--compare", a, "--tgt", "en",
                                            "--out", tmp_path / "cmp"], capsys)
    assert result.returncode == 0, result.stderr
    compared = evaluate_json(result.stdout)["compare"]
    for test, samples in (("bs", "1000"), ("ar", "10000")):
        text = sacrebleu_cli(str(ref), "-i", str(a), str(b), "-m", "bleu", "chrf", "--tokenize", "13a",
                             f"--paired-{test}", f"--paired-{test}-n", samples)
        bleu_p, chrf_p = (float(p) for p in re.findall(r"p = ([0-9.]+)", text))
        assert (compared[f"bleu_p_{test}"], compared[f"chrf_p_{test}"]) == (bleu_p, chrf_p)
    assert compared["baseline_bleu"] < evaluate_json(result.stdout)["bleu"]
    script = (tmp_path / "cmp.sacrebleu.sh").read_text(encoding="utf-8")
    assert "--paired-bs" in script and "--paired-ar" in script


@pytest.mark.parametrize("case, message", [
    ("bad-utf8", r"hyp\.txt:3: invalid UTF-8"),
    ("short", r"hyp\.txt has 299 lines but .*ref\.en has 300"),
    ("empty-ref", r"ref-empty\.en:2: empty reference line"),
    ("with-run", r"--run scores a model; --hyp/--ref score plain text"),
    ("no-ref", r"--hyp and --ref go together"),
])
def test_bad_plain_input_is_one_line_exit_2_and_writes_nothing(files, tmp_path, capsys, monkeypatch, case, message):
    monkeypatch.chdir(tmp_path)
    lines = files["a.en"].read_bytes().split(b"\n")
    hyp, ref = tmp_path / "hyp.txt", files["ref.en"]
    hyp.write_bytes(b"\n".join(lines))
    args = ["--hyp", hyp, "--ref", ref]
    if case == "bad-utf8":
        hyp.write_bytes(b"\n".join([*lines[:2], b"caf\xe9", *lines[3:]]))
    elif case == "short":
        hyp.write_bytes(b"\n".join(lines[1:]))
    elif case == "empty-ref":
        ref = tmp_path / "ref-empty.en"
        ref.write_bytes(b"\n".join([lines[0], b"  ", *lines[2:]]))
        args = ["--hyp", hyp, "--ref", ref]
    elif case == "with-run":
        args += ["--run", "0123"]
    elif case == "no-ref":
        args = ["--hyp", hyp]
    before = sorted(tmp_path.iterdir())
    result = run_in_process(evaluate.main, args, capsys)
    assert result.returncode == 2 and result.stdout == ""
    assert re.search(message, result.stderr) and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert sorted(tmp_path.iterdir()) == before  # no script, nothing half-written
