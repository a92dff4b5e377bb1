"""The real-data setting: ``NMT_TEST_DATA`` names the directory of the corpora the tests read
(default ../shared/data beside the checkout); without them a test is skipped, or fails under
CI=true, and either way says which variable to set."""

import os
import subprocess
import sys

import pytest
from helpers import ROOT

REAL_DATA_TEST = "tests/data/test_conllu.py::test_real_ud_japanese"  # reads $NMT_TEST_DATA/ud-samples


def run_real_data_test(tmp_path, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in ("CI", "NMT_TEST_DATA")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-vv", REAL_DATA_TEST],
                          cwd=ROOT, env={**environment, **env}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ci", ["true", ""])
def test_missing_data_names_the_variable_and_fails_under_ci(tmp_path, ci):
    result = run_real_data_test(tmp_path, NMT_TEST_DATA=str(tmp_path / "nowhere"), CI=ci)
    assert f"shared data missing: {tmp_path}/nowhere/ud-samples" in result.stdout, result.stdout[-3000:]
    assert "set NMT_TEST_DATA" in result.stdout
    if ci:
        assert result.returncode == 1 and "1 error" in result.stdout  # the fixture fails
    else:
        assert result.returncode == 0 and "1 skipped" in result.stdout


def test_the_variable_points_the_tests_at_the_data(tmp_path):
    from helpers import UD_SAMPLES, require_shared_data

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ud-samples").symlink_to(require_shared_data(UD_SAMPLES))
    result = run_real_data_test(tmp_path, NMT_TEST_DATA=str(tmp_path / "data"), CI="true")
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-3000:]
