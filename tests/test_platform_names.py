"""No module directly under ``platform/`` is named like a name of the standard library's
``platform`` module: the package is also that module (platform/__init__.py), so importing a
``platform/system.py`` would replace ``platform.system()`` for torch, Ray and everyone else."""

import importlib.util
import sysconfig
from pathlib import Path

from helpers import ROOT


def stdlib_platform_names() -> set[str]:
    """Every name of the standard library's ``platform`` module, loaded from its file under
    another name (``import platform`` finds this project's package)."""
    path = Path(sysconfig.get_paths()["stdlib"]) / "platform.py"
    spec = importlib.util.spec_from_file_location("stdlib_platform", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return set(dir(module))


def submodule_names(package: Path) -> set[str]:
    """The modules ``import package.NAME`` finds directly under ``package``: its .py files and
    its directories (packages, with or without ``__init__.py``)."""
    files = {path.stem for path in package.glob("*.py") if path.stem != "__init__"}
    folders = {path.name for path in package.iterdir() if path.is_dir() and path.name.isidentifier()}
    return files | (folders - {"__pycache__"})


def test_no_module_of_the_platform_package_shadows_a_name_of_the_stdlib_module():
    names = stdlib_platform_names()
    assert {"system", "machine", "uname", "python_version", "platform", "os"} <= names  # the stdlib module, not ours
    modules = submodule_names(ROOT / "platform")
    assert {"train", "tune", "data", "launch"} <= modules
    assert sorted(modules & names) == []


def test_the_name_check_catches_a_module_and_a_package(tmp_path):
    for name in ("system.py", "config.py", "__init__.py"):
        (tmp_path / name).write_text("")
    for name in ("machine", "data", "__pycache__"):
        (tmp_path / name).mkdir()
    assert submodule_names(tmp_path) == {"system", "config", "machine", "data"}
    assert sorted(submodule_names(tmp_path) & stdlib_platform_names()) == ["machine", "system"]
