"""``pip install .`` installs the whole project: the wheel built from a clean copy of the checkout
holds every module of ``platform``, ``models`` and ``search_spaces``, the YAML search spaces
and the licence, and nothing else (no tests, no benchmarks, no bytecode)."""

import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from helpers import ROOT
from packaging.requirements import Requirement

PACKAGES = ("platform", "models", "search_spaces")
MODULES = ("nmt.py",)  # top-level modules: the nmt console script's
# what a fresh clone does not have (.gitignore): run-time output, environments, build output
NOT_IN_A_CLONE = {"build", "dist", "data", "runs", "mlruns", "venv"}


def source_files() -> list[str]:
    """What the wheel must hold: every .py of the packages, every YAML space, by path."""
    files = [path for package in PACKAGES for path in (ROOT / package).rglob("*.py") if "__pycache__" not in path.parts]
    files += (ROOT / "search_spaces").glob("*.yaml")
    files += [ROOT / name for name in MODULES]
    return sorted(path.relative_to(ROOT).as_posix() for path in files)


def clean_copy(target: Path) -> Path:
    """The checkout as a fresh clone has it: no bytecode, build output, data or environments."""
    def ignored(directory: str, names: list[str]) -> set[str]:
        skip = {name for name in names if name == "__pycache__" or name.endswith((".pyc", ".egg-info"))}
        if Path(directory) == ROOT:
            skip |= {name for name in names if name.startswith(".") or name in NOT_IN_A_CLONE or name.endswith(".db")}
        return skip

    return Path(shutil.copytree(ROOT, target, ignore=ignored))


def have_build_requirements() -> bool:
    """Whether this environment has what ``[build-system] requires`` (then the build needs no
    index: ``--no-build-isolation``); a fresh Python 3.11 venv's setuptools 65 is too old."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
        import tomli as tomllib
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    for requirement in map(Requirement, requires):
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            return False
        if not requirement.specifier.contains(version, prereleases=True):
            return False
    return True


def test_the_wheel_holds_every_module_the_search_spaces_and_the_licence(tmp_path):
    source = clean_copy(tmp_path / "checkout")
    offline = ["--no-build-isolation"] if have_build_requirements() else []  # else pip fetches setuptools
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w",
                             str(tmp_path / "wheels"), *offline], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = (tmp_path / "wheels").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        dist_info = metadata.split("/")[0]
        fields = archive.read(metadata).decode().split("\n\n")[0].splitlines()
        licence = archive.read(f"{dist_info}/licenses/LICENSE") if f"{dist_info}/licenses/LICENSE" in names else b""
    expected = source_files()
    assert len(expected) > 60 and "platform/sweeps/sweep.py" in expected and "search_spaces/dbsa.yaml" in expected
    assert [name for name in expected if name not in names] == []  # nothing missing
    assert {name.split("/")[0] for name in names} == {*PACKAGES, *MODULES, dist_info}  # and nothing else
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    assert licence == (ROOT / "LICENSE").read_bytes()
    assert "License-Expression: Apache-2.0" in fields and "License-File: LICENSE" in fields


def test_the_licence_is_the_full_apache_2_text():
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:5] == ["Apache", "License", "Version", "2.0,", "January"]
    for part in ("TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "1. Definitions.",
                 "9. Accepting Warranty or Additional Liability.", "END OF TERMS AND CONDITIONS",
                 "APPENDIX: How to apply the Apache License to your work."):
        assert part in text, part
