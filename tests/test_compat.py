"""Private Ray, Optuna and MLflow APIs: all in ``platform/compat.py`` (the tests' own in
``tests/ray_private.py``), present in the installed versions, and named when one moves."""

import re

import pytest
import tomllib
from helpers import ROOT

from platform import compat

# a module path with a private part (ray._private, ray.train.v2._internal, mlflow.x._y), or the
# private attributes of Ray's OptunaSearch / ASHA, a study's storage, ray.init's node address
PRIVATE = re.compile(r"\b(ray|optuna|mlflow)(\.\w+)*\._\w+|\._ot_\w+|\._completed_trials|\._brackets|\._rungs"
                     r"|\bstudy\._storage|\b_node_ip_address|\bsystem_metrics\.metrics")


# the only files that may hold one: the platform's and the tests' own, and this test's patterns
HOLDERS = ("platform/compat.py", "tests/ray_private.py", "tests/test_compat.py")


def private_api_users(root=ROOT) -> list[str]:
    """``file:line: code`` of every line of platform/, models/, tests/ and benchmarks/ outside
    ``HOLDERS`` that names a private API."""
    return [f"{path.relative_to(root).as_posix()}:{number}: {line.strip()}"
            for folder in ("platform", "models", "tests", "benchmarks")
            for path in sorted((root / folder).rglob("*.py"))
            if path.relative_to(root).as_posix() not in HOLDERS
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if PRIVATE.search(line) and not line.lstrip().startswith("#")]


def test_no_module_but_compat_uses_a_private_api():
    assert private_api_users() == []


def test_only_the_holders_by_their_path_are_let_off(tmp_path):
    """A platform module named like a holder is still checked: the holders go by their path."""
    for path in ("platform/launch/compat.py", "platform/ray_private.py", "models/x.py", "tests/ray_private.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("from ray._private import services\n")
    assert sorted(user.split(":")[0] for user in private_api_users(tmp_path)) == [
        "models/x.py", "platform/launch/compat.py", "platform/ray_private.py"]


def test_the_pattern_finds_what_it_is_for():
    for line in ("from ray._private import services", "from ray.train.v2._internal.execution import context",
                 "searcher._ot_study.tell(t)", "kwargs['_node_ip_address'] = ip", "scheduler._brackets[0]",
                 "from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor"):
        assert PRIVATE.search(line), line
    assert not PRIVATE.search("from ray.tune.search.optuna import OptunaSearch")
    assert not PRIVATE.search("node = ray.get_runtime_context().get_node_id()")  # public


def test_the_installed_versions_have_every_private_api_used():
    assert compat.missing() == []
    compat.check()


def test_a_moved_api_is_named_with_the_versions_checked_against(monkeypatch):
    monkeypatch.setattr(compat, "MODULE_ATTRIBUTES", [*compat.MODULE_ATTRIBUTES, ("ray._private.services", "gone_fn"),
                                                      ("ray._no_such_module", "x")])
    with pytest.raises(RuntimeError) as moved:
        compat.check()
    message = str(moved.value)
    assert "(ray._private.services.gone_fn, ray._no_such_module)" in message
    assert "checked against ray 2.60.0, optuna 5.0.0, mlflow 3.17.2" in message
    with pytest.raises(RuntimeError, match=r"\(OptunaSearch._ot_study, OptunaSearch._ot_trials, "
                                           r"OptunaSearch._completed_trials\)"):
        compat.check_searcher(object())


def test_the_bounds_and_the_constraints_agree_with_the_versions_checked_against():
    """pyproject.toml caps each library below the next minor of the version checked against, and
    constraints.txt (what CI installs with) pins exactly that version."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    for name, version in compat.CHECKED_AGAINST.items():
        major, minor, _ = (int(part) for part in version.split("."))
        spec = next(d for d in dependencies if re.match(rf"{name}\b", d))
        assert f"<{major}.{minor + 1}" in spec, spec
        assert pins[name] == version


def test_a_ray_whose_optuna_searcher_changed_is_named_at_start(monkeypatch):
    """The internals PruneAwareOptunaSearch relies on, checked loudly (as a newer Ray would fail)."""
    from ray.tune.search.optuna import OptunaSearch

    from platform.sweeps.searcher import make_searcher
    from platform.sweeps.spaces import load_space

    space = load_space("gumbel", "sweep")
    make_searcher(space, seed=0, max_iterations=4)  # this Ray: fine
    original = OptunaSearch.__init__

    def renamed(self, *args, **kwargs):  # a Ray that renamed _ot_trials
        original(self, *args, **kwargs)
        del self._ot_trials

    monkeypatch.setattr(OptunaSearch, "__init__", renamed)
    with pytest.raises(RuntimeError, match=r"lack what the platform uses \(OptunaSearch\._ot_trials\); it was checked "
                                           r"against ray 2\.60\.0"):
        make_searcher(space, seed=0, max_iterations=4)
