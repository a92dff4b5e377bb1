"""Raw text in: a dataset records how ``platform.parse`` segmented each side (real GiNZA on real
Tanaka Japanese), and a model trained on it translates a raw Japanese sentence (no spaces) exactly
as it translates its segmented form, through ``platform.translate`` and through the served MLflow
model over HTTP; ``--pre-segmented`` keeps the words as given."""

import gzip

import pytest
from helpers import require_module, run_in_process, start_session_cluster
from servers import served_predictions

from platform import parse, prepare, translate
from platform.data import dataset as ds
from platform.data.conllu import read_conllu
from platform.data.dataset import PreparedDataset
from platform.inference import Trained
from platform.training.config import load_train_config
from platform.training.context import Context
from platform.training.hooks import LocalHooks
from platform.training.loop import fit

PAIRS = 120


@pytest.fixture(scope="module")
def ginza_model(tanaka, tmp_path_factory, _session_ray):
    """A tiny Transformer on 120 Tanaka pairs whose Japanese side GiNZA segmented from raw text
    (``platform.parse``, a Ray job on the session's cluster), the English side as the corpus
    gives it; the raw Japanese lines too."""
    require_module("ginza", "GiNZA (the parse extra) segments the raw Japanese")
    start_session_cluster(_session_ray)
    from platform.tracking import model as mlflow_model

    directory = tmp_path_factory.mktemp("segmented")
    raw = ["".join(line.split()) for line in (tanaka / "test.ja").read_text(encoding="utf-8").splitlines()[:PAIRS]]
    (directory / "raw.ja").write_text("".join(line + "\n" for line in raw), encoding="utf-8")
    english = gzip.open(tanaka / "test.en.conllu.gz", "rt", encoding="utf-8").read().split("\n\n")[:PAIRS]
    (directory / "corpus.en.conllu").write_text("".join(block.strip("\n") + "\n\n" for block in english),
                                                encoding="utf-8")
    assert parse.main(["--lang", "ja", "--in", str(directory / "raw.ja"), "--out",
                       str(directory / "corpus.ja.conllu"), "--quiet"]) == 0
    corpus = str(directory / "corpus")
    assert prepare.main(["--train", corpus, "--dev", corpus, "--test", corpus, "--src", "ja", "--tgt", "en",
                         "--vocab-size", "450", "--out", str(directory / "data")]) == 0
    config = load_train_config({"model": {"name": "transformer", "num_encoder_layers": 1, "num_decoder_layers": 1,
                                          "d_model": 32, "num_heads": 2, "d_ff": 64},
                                "max_epochs": None, "max_updates": 40, "eval": {"max_sentences": 4},
                                "optim": {"lr": 5e-3}})
    fit(config, PreparedDataset.open(directory / "data"), Context(), LocalHooks(directory, config),
        log=lambda line: None)
    mlflow_model.save(directory / "best.pt", directory / "mlflow_model", raw[0])
    segmented = [" ".join(s.words) for s in read_conllu(directory / "corpus.ja.conllu")]
    return directory, raw[:8], segmented[:8]


def test_the_dataset_records_ginzas_segmentation_of_the_source_and_none_for_the_target(ginza_model):
    import spacy

    directory, _, _ = ginza_model
    recorded = ds.read_meta(directory / "data")["segmentation"]
    assert recorded["src"] == {"pipeline": "ja_ginza", "version": spacy.load("ja_ginza").meta["version"],
                               "strip_spaces": True}
    assert recorded["tgt"] == "pre-segmented"  # CoNLL-U that came segmented from elsewhere


def test_a_raw_japanese_sentence_is_translated_as_its_segmented_form(ginza_model, capsys, monkeypatch):
    directory, raw, segmented = ginza_model
    trained = Trained.load(checkpoint=directory / "best.pt")
    assert trained.sentences_from_texts(raw) == [line.split() for line in segmented]  # GiNZA's words
    assert all(len(words) == 1 for words in trained.sentences_from_texts(raw, pre_segmented=True))  # as given
    checkpoint = ["--checkpoint", directory / "best.pt"]
    from_raw = run_in_process(translate.main, checkpoint, capsys, monkeypatch, stdin="".join(s + "\n" for s in raw))
    from_words = run_in_process(translate.main, [*checkpoint, "--pre-segmented"], capsys, monkeypatch,
                                stdin="".join(s + "\n" for s in segmented))
    assert from_raw.returncode == from_words.returncode == 0, from_raw.stderr + from_words.stderr
    assert from_raw.stdout == from_words.stdout and len(set(from_raw.stdout.splitlines())) > 1
    unsegmented = run_in_process(translate.main, [*checkpoint, "--pre-segmented"], capsys, monkeypatch,
                                 stdin="".join(s + "\n" for s in raw))
    assert unsegmented.stdout != from_raw.stdout  # one "word" per line reads differently


@pytest.mark.slow
def test_the_served_model_segments_raw_japanese_as_the_training_data_was(ginza_model, tmp_path, capsys,
                                                                        monkeypatch):
    directory, raw, segmented = ginza_model
    expected = run_in_process(translate.main, ["--checkpoint", directory / "best.pt", "--pre-segmented"], capsys,
                              monkeypatch, stdin="".join(s + "\n" for s in segmented))
    assert served_predictions(directory / "mlflow_model", tmp_path, raw) == expected.stdout.splitlines()
