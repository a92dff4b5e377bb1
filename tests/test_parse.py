"""``python -m platform.parse`` with the real ja_ginza pipeline: one tree per line."""

from helpers import require_module, run_module

from platform.data.conllu import read_conllu


def test_ginza_parses_each_line_into_one_tree(tanaka, tmp_path):
    require_module("ja_ginza", "the [parse] extra is not installed")
    lines = (tanaka / "dev.ja").read_text(encoding="utf-8").splitlines()[:40]
    source = tmp_path / "dev.ja"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "dev.ja.conllu"
    result = run_module("platform.parse", "--lang", "ja", "--in", source, "--out", out, "--batch-size", "16")
    assert result.returncode == 0, result.stderr
    sentences = read_conllu(out)  # valid CoNLL-U, one root each (the reader checks)
    assert len(sentences) == 40
    for sentence, line in zip(sentences, lines):
        assert "".join(sentence.words) == "".join(line.split())  # GiNZA re-segmented the line
        assert sentence.text == line.strip()
        assert not any(rel.endswith("_bunsetu") for rel in sentence.deprels)


def test_bad_parse_input_fails_cleanly(tmp_path):
    source = tmp_path / "x.ja"
    source.write_text("今日は晴れ。\n\n明日は雨。\n", encoding="utf-8")
    result = run_module("platform.parse", "--lang", "xx", "--in", source, "--out", tmp_path / "o.conllu")
    assert result.returncode == 2 and "no default spaCy pipeline for 'xx'" in result.stderr
    require_module("ja_ginza", "the [parse] extra is not installed")
    result = run_module("platform.parse", "--lang", "ja", "--in", source, "--out", tmp_path / "o.conllu")
    assert result.returncode == 2 and f"{source}:2: empty line" in result.stderr
    assert not (tmp_path / "o.conllu").exists()
