"""The MLflow pyfunc model of a trained run, as MLflow's "models from code": MLflow runs this
file to load the model (``mlflow.pyfunc.load_model``, ``mlflow models serve``), with the model's
``code/`` directory (this repository's ``platform`` and ``models`` packages) on ``sys.path``.

``predict`` takes source sentences (a list of strings, or a one-column DataFrame): plain
text, or one CoNLL-U block per sentence.  Plain text is segmented (and, for models that read
source trees, parsed) by the pipeline that segmented the training data, as ``platform.translate``
does (``Trained.sentences_from_texts``); where the data arrived segmented, it is words separated
by spaces, and tree models parse it with the language's ``platform.parse`` pipeline where the
``parse`` extra is installed.  The recorded pipeline is loaded with the model, so a server
without it fails at start, not at its first request.  It returns the
translations, detokenized, in order; ``params`` ``beam`` and ``lenpen`` override the run's
decoding as ``platform.translate``'s flags do.  ``platform.tracking.model.save`` stores this file
in every model it writes.

The serving process imported the standard library's ``platform`` before it loads this file
(MLflow, uvicorn and torch all do), so ``import platform.inference`` would find that module.
``_use_this_projects_platform`` puts this project's package in its place: it is the standard
library module too (its ``__init__`` re-exports all of it, docs/architecture.md), exactly as
whenever this repository's commands run.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _use_this_projects_platform() -> None:
    current = sys.modules.get("platform")
    if current is not None and hasattr(current, "__path__"):
        return  # this project's package already
    for entry in sys.path:
        root = Path(entry or ".") / "platform"
        if (root / "inference.py").is_file():
            spec = importlib.util.spec_from_file_location("platform", root / "__init__.py",
                                                          submodule_search_locations=[str(root)])
            module = importlib.util.module_from_spec(spec)
            sys.modules["platform"] = module
            spec.loader.exec_module(module)
            return
    raise ImportError("this project's platform package is not on sys.path (the MLflow model's code/ directory)")


_use_this_projects_platform()

import mlflow.models  # noqa: E402 - after the package above
import mlflow.pyfunc  # noqa: E402

from platform.tracking.model import CHECKPOINT  # noqa: E402


class Translator(mlflow.pyfunc.PythonModel):
    def load_context(self, context) -> None:
        from platform.inference import Trained  # torch: MLflow imports this module before it loads the model

        self.trained = Trained.load(checkpoint=context.artifacts[CHECKPOINT])
        if isinstance(self.trained.src_segmenter, dict):  # fail now, not at the first request
            from platform.data.parsing import load_pipeline

            load_pipeline(self.trained.src_segmenter["pipeline"])

    def predict(self, context, model_input: list[str], params: dict | None = None) -> list[str]:
        params = params or {}
        texts = model_input.iloc[:, 0].tolist() if hasattr(model_input, "columns") else list(model_input)
        sentences = self.trained.sentences_from_texts([str(text) for text in texts])
        return self.trained.translate_all(sentences, params.get("beam"), params.get("lenpen"))


mlflow.models.set_model(Translator())
