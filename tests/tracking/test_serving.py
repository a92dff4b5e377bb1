"""The logged MLflow model translates: loaded back with ``mlflow.pyfunc.load_model`` and served
by ``mlflow models serve`` on 127.0.0.1 (from outside the repository, where ``platform`` is the
standard library's until the model loads), it gives what ``platform.translate`` gives on the
same checkpoint."""

import gzip
import sys

import pytest
from helpers import tiny_config
from servers import served_predictions

from platform.data.dataset import PreparedDataset
from platform.training.config import load_train_config
from platform.training.context import Context
from platform.training.hooks import LocalHooks
from platform.training.loop import fit


@pytest.fixture(scope="module")
def trained(demo_dataset, tmp_path_factory):
    """A small transformer after 150 updates (its translations vary), saved as an MLflow model."""
    from platform.tracking import model as mlflow_model

    directory = tmp_path_factory.mktemp("served")
    config = tiny_config("transformer", max_epochs=None, max_updates=150, eval={"max_sentences": 4},
                         optim={"lr": 5e-3})
    dataset = PreparedDataset.open(demo_dataset)
    fit(config, dataset, Context(), LocalHooks(directory, config), log=lambda line: None)
    sources = list(dataset.dev.texts["src_text"][:6])
    mlflow_model.save(directory / "best.pt", directory / "mlflow_model", sources[0])
    return directory, sources


@pytest.fixture
def translate_cli(monkeypatch, capsys):
    """``translate_cli(checkpoint, lines, *extra)``: what ``python -m platform.translate
    --checkpoint CHECKPOINT EXTRA`` writes for ``lines`` on stdin, from its ``main`` in this
    process (the CLI as a process of its own: tests/test_inference.py)."""
    import io

    from platform import translate

    def translated(checkpoint, lines: str, *extra: str) -> list[str]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines.encode("utf-8")), encoding="utf-8"))
        capsys.readouterr()
        assert translate.main(["--checkpoint", str(checkpoint), *extra]) == 0
        return capsys.readouterr().out.splitlines()

    return translated


@pytest.fixture(scope="module")
def registered(trained, tmp_path_factory):
    """The model logged to a run of a real MLflow store and registered twice as ``nmt-transformer``
    (``platform.tracking.registry``, what ``--register-model`` calls), the alias ``champion``
    then moved back to version 1 by hand, as a user would; returns the store's URI."""
    from mlflow import MlflowClient

    from platform.tracking import runs
    from platform.tracking.logger import RunLogger
    from platform.tracking.registry import register

    directory, _ = trained
    uri = f"sqlite:///{tmp_path_factory.mktemp('registry')}/mlflow.db"
    run_id = runs.start_run(uri, "served", "r", {}, {"recipe": "vaswani2017/base"}, "")
    logger = RunLogger(uri, run_id)
    logger.model(directory / "mlflow_model", 150, {"model": "transformer"})
    logger.metrics({"dev_bleu": 12.5}, step=150)
    assert logger.close() == []
    first = register(uri, run_id, "nmt-transformer", "a test")
    second = register(uri, run_id, "nmt-transformer", "a test")
    client = MlflowClient(uri)
    assert (first.version, second.version) == ("1", "2")
    assert str(client.get_model_version_by_alias("nmt-transformer", "champion").version) == "2"  # moved to the newest
    client.set_registered_model_alias("nmt-transformer", "champion", "1")
    version = client.get_model_version("nmt-transformer", "1")
    assert version.tags["metric.dev_bleu"] == "12.5" and version.tags["recipe"] == "vaswani2017/base"
    assert version.tags["run_id"] == run_id and version.tags["registered_by"] == "a test"
    return uri


def test_the_pyfunc_model_translates_as_platform_translate_does(trained, registered, translate_cli):
    import mlflow
    import mlflow.pyfunc

    directory, sources = trained
    mlflow.set_tracking_uri(registered)
    try:
        loaded = mlflow.pyfunc.load_model("models:/nmt-transformer@champion")
    finally:
        mlflow.set_tracking_uri(None)
    signature = loaded.metadata.signature
    assert {p.name: p.default for p in signature.params.params} == {"beam": 4, "lenpen": 0.6}  # the recipe's
    expected = translate_cli(directory / "best.pt", "".join(s + "\n" for s in sources), "--beam", "2")
    assert len(set(expected)) > 1  # a model whose translations vary
    assert loaded.predict(sources, params={"beam": 2}) == expected
    assert loaded.predict(sources[:2]) == translate_cli(directory / "best.pt", "".join(s + "\n" for s in sources[:2]))


def test_a_model_with_no_logged_model_is_not_registered(tmp_path):
    from platform.errors import UserError
    from platform.tracking import runs
    from platform.tracking.registry import register

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id = runs.start_run(uri, "served", "r", {}, {}, "")
    with pytest.raises(UserError, match=f"run {run_id} has no model to register"):
        register(uri, run_id, "nmt-none", "a test")
    with pytest.raises(UserError, match="a model name is not empty"):
        register(uri, run_id, "nmt/none", "a test")


def test_a_tree_model_takes_conllu_and_says_what_plain_text_needs(demo_dataset, tmp_path, translate_cli):
    import mlflow.pyfunc

    from platform.errors import UserError
    from platform.tracking import model as mlflow_model

    config = load_train_config({"model": {"name": "tree2seq", "d_embed": 16, "d_hidden": 16}, "max_epochs": 1,
                                "max_steps_per_epoch": 2, "eval": {"max_sentences": 4}})
    dataset = PreparedDataset.open(demo_dataset)
    fit(config, dataset, Context(), LocalHooks(tmp_path, config), log=lambda line: None)
    mlflow_model.save(tmp_path / "best.pt", tmp_path / "mlflow_model", dataset.dev.texts["src_text"][0])
    loaded = mlflow.pyfunc.load_model(str(tmp_path / "mlflow_model"))
    conllu = gzip.open(demo_dataset / "conllu" / "test.sov.conllu.gz", "rt", encoding="utf-8").read()
    blocks = [block + "\n" for block in conllu.split("\n\n")[:3]]
    expected = translate_cli(tmp_path / "best.pt", "\n".join(blocks) + "\n", "--conllu", "--beam", "2")
    assert loaded.predict(blocks, params={"beam": 2}) == expected
    with pytest.raises(UserError, match="tree2seq reads source trees: give CoNLL-U"):
        loaded.predict(["plain words only"])


@pytest.mark.slow
def test_mlflow_models_serve_answers_over_http_as_platform_translate_does(trained, registered, tmp_path,
                                                                          translate_cli):
    """``mlflow models serve -m models:/NAME@champion``: the registered version the alias points at."""
    directory, sources = trained
    answer = served_predictions("models:/nmt-transformer@champion", tmp_path, sources, {"beam": 2},
                                tracking_uri=registered)
    assert answer == translate_cli(directory / "best.pt", "".join(s + "\n" for s in sources), "--beam", "2")
