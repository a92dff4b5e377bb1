"""Bad CoNLL-U gets one clear line naming file and line, exit 2, no traceback, no output;
real UD files with multiword tokens and empty nodes are accepted."""

import gzip
import json
import re
import subprocess

import pytest
from helpers import run_in_process, run_module

from platform.data.conllu import read_conllu
from platform.errors import InputError

GOOD = ("# text = a b c\n1\ta\ta\tX\t_\t_\t2\tdep\t_\t_\n2\tb\tb\tX\t_\t_\t0\troot\t_\t_\n"
        "3\tc\tc\tX\t_\t_\t2\tdep\t_\t_\n\n")


def row(token_id, head, form="w"):
    return f"{token_id}\t{form}\t{form}\tX\t_\t_\t{head}\tdep\t_\t_\n"


BAD_SOURCES = {
    # case: (source-side CoNLL-U text, expected line, expected message fragment)
    "wrong column count": (GOOD + "1\ta\ta\tX\t_\t_\t0\troot\t_\n\n", 6, "expected 10 tab-separated columns, found 9"),
    "non-integer head": (GOOD + row(1, "x") + "\n", 6, "HEAD 'x' is not a non-negative integer"),
    "head out of range": (GOOD + row(1, 0) + row(2, 7) + "\n", 7, "HEAD 7 out of range (sentence has 2 words)"),
    "cycle": (GOOD + row(1, 0) + row(2, 3) + row(3, 2) + "\n", 7, "cycle in heads: 2 -> 3 -> 2"),
    "self loop": (GOOD + row(1, 1) + "\n", 6, "word 1 is its own head"),
    "no root": (GOOD + row(1, 2) + row(2, 1) + "\n", 6, "no root"),
    "several roots": (GOOD + row(1, 0) + row(2, 0) + "\n", 7, "2 roots (words 1, 2 have HEAD 0); pass --fix-roots"),
    "non-consecutive ids": (GOOD + row(1, 0) + row(3, 1) + "\n", 7, "non-consecutive word ID 3 (expected 2)"),
    "non-integer id": (GOOD + row("a", 0) + "\n", 6, "ID 'a' is not an integer"),
    "empty sentence": (GOOD + "# text = nothing\n\n", 6, "sentence has no words"),
    "empty input": ("", None, "no sentences (empty input)"),
}


def write_pair(directory, src_text, tgt_text, name="train"):
    (directory / f"{name}.xx.conllu").write_bytes(src_text if isinstance(src_text, bytes) else src_text.encode())
    (directory / f"{name}.yy.conllu").write_bytes(tgt_text if isinstance(tgt_text, bytes) else tgt_text.encode())
    return directory / name


def prepare_args(prefix, out):
    return ["--train", prefix, "--dev", prefix, "--src", "xx", "--tgt", "yy", "--out", out, "--vocab-size", "20"]


def prepare(capsys, *args) -> subprocess.CompletedProcess:
    """``python -m platform.prepare ARGS`` as its ``__main__`` runs it (``run_cli``: exit status,
    one-line errors), in this process: no interpreter start per case.  The CLI as a process of its
    own: test_missing_file_and_unknown_flag_fail_cleanly."""
    from platform import prepare as cli

    return run_in_process(cli.main, args, capsys)


def assert_clean_failure(result, out, expected):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and expected in lines[-1], result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
    assert not any(p.name.startswith(f".{out.name}") for p in out.parent.iterdir())  # no temp left


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_bad_source_side_fails_cleanly(tmp_path, capsys, case):
    source, line, message = BAD_SOURCES[case]
    target = GOOD * (source.count("\n\n"))
    prefix = write_pair(tmp_path, source, target)
    out = tmp_path / "out"
    result = prepare(capsys, *prepare_args(prefix, out))
    where = f"{prefix}.xx.conllu:{line}: " if line else f"{prefix}.xx.conllu: "
    assert_clean_failure(result, out, where + message)


@pytest.mark.parametrize("case,side,split", [("cycle", "yy", "train"), ("head out of range", "xx", "dev"),
                                             ("several roots", "yy", "test"), ("wrong column count", "yy", "dev")])
def test_bad_input_on_the_target_side_and_in_dev_or_test_fails_cleanly(tmp_path, capsys, case, side, split):
    bad, line, message = BAD_SOURCES[case]
    good = GOOD * bad.count("\n\n")
    prefixes = {name: write_pair(tmp_path, GOOD * 2, GOOD * 2, name=name) for name in ("train", "dev", "test")}
    prefixes[split] = write_pair(tmp_path, bad if side == "xx" else good, bad if side == "yy" else good, name=split)
    out = tmp_path / "out"
    result = prepare(capsys, "--train", prefixes["train"], "--dev", prefixes["dev"], "--test",
                        prefixes["test"], "--src", "xx", "--tgt", "yy", "--out", out, "--vocab-size", "20")
    assert_clean_failure(result, out, f"{prefixes[split]}.{side}.conllu:{line}: {message}")


def test_invalid_utf8_names_the_line(tmp_path, capsys):
    prefix = write_pair(tmp_path, GOOD.encode() + b"1\t\xff\xfe\tx\tX\t_\t_\t0\troot\t_\t_\n\n", GOOD * 2)
    out = tmp_path / "out"
    result = prepare(capsys, *prepare_args(prefix, out))
    assert_clean_failure(result, out, f"{prefix}.xx.conllu:6: invalid UTF-8")


def test_mismatched_sentence_counts(tmp_path, capsys):
    prefix = write_pair(tmp_path, GOOD * 3, GOOD * 2)
    out = tmp_path / "out"
    result = prepare(capsys, *prepare_args(prefix, out))
    assert_clean_failure(result, out, f"{prefix}.xx.conllu:11: sentence counts differ: "
                                      f"{prefix}.xx.conllu has 3, {prefix}.yy.conllu has 2")


def test_missing_file_and_unknown_flag_fail_cleanly(tmp_path):
    out = tmp_path / "out"
    result = run_module("platform.prepare", *prepare_args(tmp_path / "nothing", out))
    assert_clean_failure(result, out, "nothing.xx.conllu[.gz]: file not found")
    result = run_module("platform.prepare", "--data", "demo", "--out", out, "--subword-head", "middle")
    assert result.returncode == 2 and "invalid choice: 'middle'" in result.stderr


def test_fix_roots_reattaches_extra_roots_to_the_first(tmp_path):
    path = tmp_path / "x.conllu"
    path.write_text(row(1, 0) + row(2, 0) + row(3, 2) + "\n")
    with pytest.raises(InputError):
        read_conllu(path)
    (sentence,) = read_conllu(path, fix_roots=True)
    assert sentence.heads == (-1, 0, 1) and sentence.roots_fixed == 1


def test_fix_roots_through_the_cli_counts_what_it_fixed(tmp_path, capsys):
    two_roots = row(1, 0) + row(2, 0) + row(3, 2) + "\n"
    prefix = write_pair(tmp_path, GOOD + two_roots, two_roots + GOOD)
    out = tmp_path / "out"
    result = prepare(capsys, *prepare_args(prefix, out))
    # the pairs are read in step: the first pair's target is the first problem
    assert_clean_failure(result, out, f"{prefix}.yy.conllu:2: 2 roots")
    result = prepare(capsys, *prepare_args(prefix, out), "--fix-roots")
    assert result.returncode == 0, result.stderr
    splits = json.loads((out / "meta.json").read_text())["splits"]
    assert splits["train"]["roots_fixed"] == 2 and splits["train"]["pairs_written"] == 2  # one per side


def test_existing_output_is_never_replaced_without_overwrite(tmp_path, capsys):
    prefix = write_pair(tmp_path, GOOD * 2, GOOD * 2)
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    result = prepare(capsys, *prepare_args(prefix, out))
    assert result.returncode == 2 and "already exists; pass --overwrite" in result.stderr
    assert (out / "precious.txt").read_text() == "keep me"
    result = prepare(capsys, *prepare_args(prefix, out), "--overwrite")
    assert result.returncode == 0, result.stderr
    assert (out / "train.parquet").exists() and not (out / "precious.txt").exists()


def test_real_ud_english_with_multiword_tokens_and_empty_nodes(ud_samples):
    path = ud_samples / "en_ewt-ud-dev.conllu.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        raw = handle.read()
    assert len(re.findall(r"^\d+-\d+\t", raw, re.M)) == 359  # the file really has multiword ranges
    assert len(re.findall(r"^\d+\.\d+\t", raw, re.M)) == 4  # and empty nodes
    sentences = read_conllu(path)
    assert len(sentences) == 2001
    # every word line is read, no range or empty-node line is
    assert sum(len(s.words) for s in sentences) == len(re.findall(r"^\d+\t", raw, re.M))
    todays = next(s for s in sentences if s.text.startswith("Today's incident"))
    assert todays.words[:2] == ("Today", "'s")  # the range line 1-2 "Today's" was skipped
    assert all(sum(h == -1 for h in s.heads) == 1 for s in sentences)


def test_real_ud_japanese(ud_samples):
    sentences = read_conllu(ud_samples / "ja_gsd-ud-dev.conllu.gz")
    assert len(sentences) == 507
