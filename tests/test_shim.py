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
    import platform.config_io


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
        import platform.config_io  # our package, from the uploaded working_dir

        return platform.system(), platform.__file__.endswith("platform/__init__.py"), platform.config_io.__name__

    assert ray.get(probe.remote()) == ("Linux", True, "platform.config_io")


def test_the_nmt_command_runs_the_commands_from_any_directory(tmp_path):
    """Outside the checkout ``python -m platform.train`` finds the standard library's module;
    the installed ``nmt`` console script runs the package's commands from anywhere."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "nmt"  # installed by pip install -e . (README)
    outside = subprocess.run([sys.executable, "-m", "platform.selfcheck"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=60)
    assert outside.returncode != 0  # what the command is for
    probe = subprocess.run([str(script), "selfcheck"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["Linux", str(ROOT / "platform" / "__init__.py")]
    helped = subprocess.run([str(script), "prepare", "--help"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert helped.returncode == 0 and "--subword-head" in helped.stdout
    wrong = subprocess.run([str(script), "trian"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and wrong.stderr.strip() == "nmt: no command 'trian'; did you mean 'train'?"
