"""syntax-aware NMT platform: CLIs, configs, data pipeline, Ray drivers, MLflow, evaluation.

This package is named ``platform`` because its commands are
``python -m platform.<cli>``.  That name shadows the standard-library module ``platform``,
which torch, ray, mlflow and pytest import (``platform.system()``, ``platform.machine()``...).
Whenever this package is what ``import platform`` finds (the repository root is first on
``sys.path``), it must therefore *also be* the standard-library module.

The shim below executes the stdlib ``platform.py`` (located through ``sysconfig``, never via
``sys.path``, which would find this file again) under the module name ``platform`` and copies
its names into this package.  Functions keep their own globals, so they behave exactly as the
stdlib ones; classes such as ``uname_result`` keep ``__module__ == "platform"`` and so still
pickle.  See docs/architecture.md; tests/test_shim.py guards it.
"""

import importlib.util as _importlib_util
import os as _os
import sysconfig as _sysconfig

_STDLIB_PLATFORM = _os.path.join(_sysconfig.get_paths()["stdlib"], "platform.py")
_spec = _importlib_util.spec_from_file_location("platform", _STDLIB_PLATFORM)
_stdlib = _importlib_util.module_from_spec(_spec)
_spec.loader.exec_module(_stdlib)
globals().update(
    {name: value for name, value in vars(_stdlib).items() if not name.startswith("__")}
)
__version__ = _stdlib.__version__  # the stdlib module's version string, as callers expect
del _spec
