"""Repository-root conftest: make ``platform`` resolve to this project's package under pytest.

pytest imports the standard-library ``platform`` module (for its header) before any conftest
runs, so ``sys.modules["platform"]`` already holds the stdlib module when the tests start and
``import platform.prepare`` would fail with "platform is not a package".  pytest has put this
directory first on ``sys.path`` by now, so dropping the cached module and importing again
loads our package, which re-exports the stdlib API (see platform/__init__.py).  Modules that
imported the stdlib module earlier keep their reference, which still works.
"""

import sys

if not hasattr(sys.modules.get("platform"), "__path__"):
    sys.modules.pop("platform", None)
    import platform  # noqa: F401  (our package, with the stdlib API)
