"""Pure PyTorch models (docs/architecture.md): imports only torch and numpy; no Ray, MLflow, pyarrow or I/O.

``MODELS`` maps each model name to its config class and preset; ``build_model`` validates a
config and constructs the model.  Decoding (greedy/beam) is in ``models.search``.
"""

from models.build import MODELS, ModelSpec, build_model, default_config

__all__ = ["MODELS", "ModelSpec", "build_model", "default_config"]
