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
from platform.training.loop import LocalHooks, fit


@pytest.fixture(scope="module")
def trained(demo_dataset, tmp_path_factory):
    """A small transformer after 150 updates (its translations vary), saved as an MLflow model."""
    from platform.tracking import model as mlflow_model

    directory = tmp_path_factory.mktemp("served")
    config = tiny_config("transformer", max_epochs=None, max_updates=150, eval={"max_sentences": 4},
                         optim={"lr": 5e-3})
    dataset = PreparedDataset.open(demo_dataset)
    fit(config, dataset, Context(), LocalHooks(directory), log=lambda line: None)
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


def test_the_pyfunc_model_translates_as_platform_translate_does(trained, tmp_path, monkeypatch, translate_cli):
    import mlflow
    import mlflow.pyfunc

    from platform.tracking import runs
    from platform.tracking.logger import RunLogger

    directory, sources = trained
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.chdir(tmp_path)
    run_id = runs.start_run(uri, "served", "r", {}, {}, "")
    logger = RunLogger(uri, run_id)
    logger.model(directory / "mlflow_model", 150, {"model": "transformer"})
    assert logger.close() == []
    model_id = mlflow.MlflowClient(uri).get_run(run_id).outputs.model_outputs[0].model_id
    mlflow.set_tracking_uri(uri)
    try:
        version = mlflow.register_model(f"models:/{model_id}", "nmt-transformer")
        loaded = mlflow.pyfunc.load_model(f"models:/nmt-transformer/{version.version}")
    finally:
        mlflow.set_tracking_uri(None)
    signature = loaded.metadata.signature
    assert {p.name: p.default for p in signature.params.params} == {"beam": 4, "lenpen": 0.6}  # the recipe's
    expected = translate_cli(directory / "best.pt", "".join(s + "\n" for s in sources), "--beam", "2")
    assert len(set(expected)) > 1  # a model whose translations vary
    assert loaded.predict(sources, params={"beam": 2}) == expected
    assert loaded.predict(sources[:2]) == translate_cli(directory / "best.pt", "".join(s + "\n" for s in sources[:2]))


def test_a_tree_model_takes_conllu_and_says_what_plain_text_needs(demo_dataset, tmp_path, translate_cli):
    import mlflow.pyfunc

    from platform.errors import UserError
    from platform.tracking import model as mlflow_model

    config = load_train_config({"model": {"name": "tree2seq", "d_embed": 16, "d_hidden": 16}, "max_epochs": 1,
                                "max_steps_per_epoch": 2, "eval": {"max_sentences": 4}})
    dataset = PreparedDataset.open(demo_dataset)
    fit(config, dataset, Context(), LocalHooks(tmp_path), log=lambda line: None)
    mlflow_model.save(tmp_path / "best.pt", tmp_path / "mlflow_model", dataset.dev.texts["src_text"][0])
    loaded = mlflow.pyfunc.load_model(str(tmp_path / "mlflow_model"))
    conllu = gzip.open(demo_dataset / "conllu" / "test.sov.conllu.gz", "rt", encoding="utf-8").read()
    blocks = [block + "\n" for block in conllu.split("\n\n")[:3]]
    expected = translate_cli(tmp_path / "best.pt", "\n".join(blocks) + "\n", "--conllu", "--beam", "2")
    assert loaded.predict(blocks, params={"beam": 2}) == expected
    with pytest.raises(UserError, match="tree2seq reads source trees: give CoNLL-U"):
        loaded.predict(["plain words only"])


@pytest.mark.slow
def test_mlflow_models_serve_answers_over_http_as_platform_translate_does(trained, tmp_path, translate_cli):
    directory, sources = trained
    answer = served_predictions(directory / "mlflow_model", tmp_path, sources, {"beam": 2})
    assert answer == translate_cli(directory / "best.pt", "".join(s + "\n" for s in sources), "--beam", "2")
