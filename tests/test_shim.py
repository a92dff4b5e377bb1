"""``platform`` is this project's package and still the standard-library module (docs/architecture.md)."""

import pickle

from helpers import ROOT, run_module


def test_platform_is_our_package_with_the_stdlib_api_under_pytest():
    import platform

    assert platform.__file__ == str(ROOT / "platform" / "__init__.py")
    assert platform.system() == "Linux"
    assert platform.machine()
    assert platform.python_implementation() == "CPython"
    assert pickle.loads(pickle.dumps(platform.uname())) == platform.uname()
    import platform.config


def test_platform_works_under_python_dash_m():
    result = run_module("platform.prepare", "--help")
    assert result.returncode == 0, result.stderr
    assert "--subword-head" in result.stdout
    probe = run_module("platform.selfcheck")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["Linux", str(ROOT / "platform" / "__init__.py")]


def test_platform_works_in_a_ray_worker(ray_cluster):
    ray = ray_cluster

    @ray.remote
    def probe():
        import platform
        import platform.config  # our package, from the uploaded working_dir

        return platform.system(), platform.__file__.endswith("platform/__init__.py"), platform.config.__name__

    assert ray.get(probe.remote()) == ("Linux", True, "platform.config")
