"""Fixtures and hooks: the real data (``$NMT_TEST_DATA``, by default ../shared/data), one local
Ray cluster for the session, the session's PostgreSQL server, the test run's order and markers.
Plain helpers are in helpers.py, the servers the tests start in servers.py."""

from __future__ import annotations

import faulthandler
import os
import secrets
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from helpers import (
    SECRET,
    SECRET_VARIABLE,
    TANAKA,
    UD_SAMPLES,
    fail_or_skip,
    require_module,
    require_shared_data,
    run_module,
    start_session_cluster,
)

# tests whose cluster is their own: the session's cluster is shut down for them (see own_cluster)
OWN_CLUSTER_FIXTURES = {"own_cluster", "own_module_cluster"}


def pytest_configure(config):
    """The environment every Ray the tests start inherits, as a user's shell would export it
    (a fake secret among it: no log, param or artifact may ever show it).

    Ray runs as it does for a user by default: token authentication on, every process that
    joins presenting the session's token (its own file, not the user's ``~/.ray/auth_token``)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ[SECRET_VARIABLE] = SECRET
    if "RAY_AUTH_MODE" not in os.environ:
        token = Path(tempfile.mkdtemp(prefix="nmt-ray-auth-")) / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
        config._nmt_ray_token = token
    if not os.environ.get("NMT_PASSWORD_FILES"):  # the study storages' password files: this run's own
        os.environ["NMT_PASSWORD_FILES"] = tempfile.mkdtemp(prefix="nmt-pgpass-")
        config._nmt_password_files = os.environ["NMT_PASSWORD_FILES"]
    if not os.environ.get("NMT_DATA_CACHE"):  # the workers' node-local train copies: this run's own
        cache = tempfile.mkdtemp(prefix="nmt-data-cache-")
        os.environ["NMT_DATA_CACHE"] = cache
        config._nmt_data_cache = cache


def pytest_unconfigure(config):
    shutil.rmtree(getattr(config, "_nmt_cpu_stream_tmp", "") or "/nonexistent", ignore_errors=True)
    shutil.rmtree(getattr(config, "_nmt_password_files", "") or "/nonexistent", ignore_errors=True)
    cache = getattr(config, "_nmt_data_cache", None)
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
    token = getattr(config, "_nmt_ray_token", None)
    if token is not None:
        shutil.rmtree(token.parent, ignore_errors=True)


# the fixtures through which a test starts Ray (directly or through a fixture it uses)
RAY_FIXTURES = {"_session_ray", *OWN_CLUSTER_FIXTURES}
# the two streams pytest-xdist runs side by side (``-n 2 --dist loadgroup``, pyproject.toml)
RAY_GROUP, CPU_GROUP = "ray", "cpu"
CPU_STREAM_NICENESS = 19  # the lowest priority, and on Linux the idle class below it; Ray's own workers run at 15


def _uses_ray(item) -> bool:
    return bool(RAY_FIXTURES & set(getattr(item, "fixturenames", ())))


def _in_ray_stream(item) -> bool:
    """The tests that use Ray, and those that bound a wall time (``timed``): at full priority."""
    return _uses_ray(item) or item.get_closest_marker("timed") is not None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group markers
def pytest_collection_modifyitems(items):
    """Every test that uses a Ray cluster is ``slow``: ``pytest -m "not slow"`` is the fast
    subset that starts no Ray (tests that train otherwise carry the marker themselves).  Tests
    that need their own cluster run last, in their collected order, so that the session's
    cluster starts once and is never started again after them.

    The suite runs as two streams side by side (pytest-xdist's ``--dist loadgroup``: each group
    goes whole, in this order, to one worker).  The Ray stream (``xdist_group("ray")``) holds
    the tests that use Ray, so there is one cluster at a time, and the ``timed`` ones.  Every
    other test is the CPU stream (``"cpu"``), which runs at the lowest priority
    (``pytest_runtest_setup``).  A Ray test spends most of its time waiting for Ray's processes
    to start, so the CPU stream fills cores that would idle, and the suite takes about as long as
    the Ray stream."""
    own, shared = [], []
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if _uses_ray(item):
            item.add_marker(pytest.mark.slow)
        item.add_marker(pytest.mark.xdist_group(RAY_GROUP if _in_ray_stream(item) else CPU_GROUP))
        (own if OWN_CLUSTER_FIXTURES & fixtures else shared).append(item)
    items[:] = shared + own


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    """Under pytest-xdist, the worker that runs the CPU stream (it runs nothing else) takes, at
    its first test, the lowest priority, so the Ray stream, the suite's critical path, never
    waits for it; and a temporary directory of its own as ``$TMPDIR`` and ``$RAY_TMPDIR``, which
    every command it runs inherits.  So the Ray stream's tests never see its scratch files (one
    checks that a run leaves nothing in the temporary directory), and a Ray session there is one
    the CPU stream started (``pytest_runtest_teardown``).

    Under pytest-xdist the two streams must be two groups (pytest-xdist appends the group to
    each test's id); where they are not (pytest 9.2 no longer reads the id pytest-xdist 3.8
    rewrites; a ``--dist`` other than loadgroup), the Ray tests would run on both workers, two
    clusters at once: each test fails before its fixtures instead."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        grouped = item.config.getvalue("loadgroup") and item.nodeid.endswith((f"@{RAY_GROUP}", f"@{CPU_GROUP}"))
        if not grouped and int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
            pytest.fail(f"pytest-xdist did not put this test into its stream (pytest {pytest.__version__}, "
                        f"--dist {item.config.getvalue('dist')}): install the [dev] extra's pytest "
                        f"(pyproject.toml) and run with --dist loadgroup, or with -n 0", pytrace=False)
        if not _in_ray_stream(item):
            _join_the_cpu_stream(item.config)
            item._nmt_ray_sessions = _ray_sessions(item.config)
    return (yield)


def _join_the_cpu_stream(config) -> None:
    if getattr(config, "_nmt_cpu_stream_tmp", None) is not None:
        return
    if os.nice(0) < CPU_STREAM_NICENESS:
        os.nice(CPU_STREAM_NICENESS - os.nice(0))
    if hasattr(os, "SCHED_IDLE"):  # Linux: below niceness 19, which Ray's workers (niceness 15) share 70:30
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    directory = tempfile.mkdtemp(prefix="pytest-cpu-stream-")  # not nmt-*: what the platform's scratch is named
    os.chmod(directory, 0o1777)  # as /tmp: the PostgreSQL tests' server runs as the postgres user
    config._nmt_cpu_stream_tmp = directory
    os.environ["TMPDIR"] = os.environ["RAY_TMPDIR"] = directory
    tempfile.tempdir = None  # tempfile reads $TMPDIR again


def _ray_sessions(config) -> set[str]:
    return {path.name for path in Path(config._nmt_cpu_stream_tmp, "ray").glob("session_*")}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item):
    """A new Ray session under the CPU stream's ``$RAY_TMPDIR`` after a test of that stream
    (its fixtures' teardown included) is an error of its teardown, to be fixed by giving the test
    ``ray_cluster`` or ``own_cluster`` (``pytest_runtest_setup``)."""
    before = getattr(item, "_nmt_ray_sessions", None)
    try:
        return (yield)
    finally:
        started = sorted(_ray_sessions(item.config) - before) if before is not None else []
        if started:
            pytest.fail(f"{item.nodeid} started Ray ({started[0]}) but uses neither ray_cluster nor own_cluster, "
                        f"so it ran beside the Ray tests' cluster", pytrace=False)


# how long after a test's timeout (pytest-timeout's SIGALRM, which fails the test and runs its
# teardown) the backstop ends the whole run: a wait the signal cannot interrupt (a ``ray.get`` on
# a Train run's controller waits in Ray's C++ core), or a hung teardown
BACKSTOP_GRACE_S = 180


def _timeout_of(item) -> float:
    """The test's timeout in seconds: its ``timeout`` marker's, else the ini's (0: none)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getini("timeout") or 0)


def _end_the_run(seconds: float, name: str, config) -> None:
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # to the terminal, not into the test's captured output that os._exit drops
        capture.suspend_global_capture(in_=True)
    sys.stdout.flush()
    sys.stderr.write(f"\n{name} still running {seconds:.0f} s after it began (its timeout did not end it): "
                     f"every thread's stack, then the run ends\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(all_threads=True)
    os._exit(1)


@pytest.fixture(autouse=True)
def _backstop(request):
    """The run ends (every thread's stack shown) if a test outlives its timeout by
    ``BACKSTOP_GRACE_S``: what pytest-timeout's signal cannot interrupt still cannot hold CI to
    its limit."""
    timeout = _timeout_of(request.node)
    if timeout <= 0:
        yield
        return
    seconds = timeout + BACKSTOP_GRACE_S
    timer = threading.Timer(seconds, _end_the_run, (seconds, request.node.nodeid, request.config))
    timer.daemon = True
    timer.start()
    yield
    timer.cancel()


@pytest.fixture(scope="session")
def tanaka() -> Path:
    return require_shared_data(TANAKA)


@pytest.fixture(scope="session")
def ud_samples() -> Path:
    return require_shared_data(UD_SAMPLES)


@pytest.fixture(scope="session")
def _session_ray():
    """Shuts down, at the session's end, the Ray cluster ``ray_cluster`` started."""
    import ray

    yield ray
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def ray_cluster(_session_ray):
    """One real local Ray cluster for the session (4 logical CPUs on 2 cores), started by the
    first test that asks for it, exactly as the CLIs start a local one.

    Workers get the repository through ``runtime_env.working_dir`` (which Ray puts first on
    their PYTHONPATH), exactly as the Train and Tune drivers do."""
    return start_session_cluster(_session_ray)


def _shut_down_the_session_cluster() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def own_cluster():
    """For a test that starts a cluster of its own (a CLI run without --address, a multi-node
    cluster): the session's cluster, if this process runs one, is shut down first, so that
    there are never two Ray clusters on the machine at once.  These tests run last (see
    ``pytest_collection_modifyitems``); a later ``ray_cluster`` would start the session's again."""
    _shut_down_the_session_cluster()
    yield


@pytest.fixture(scope="module")
def own_module_cluster():
    """``own_cluster`` for a module-scoped fixture that starts a cluster its module's tests share."""
    _shut_down_the_session_cluster()
    yield


@pytest.fixture(scope="session")
def demo_dataset(tmp_path_factory) -> Path:
    """A small prepared demo dataset (2000/100/100 pairs), built once per session."""
    from platform.data import demo
    from platform.data.builtin import prepare_demo
    from platform.data.encode import PrepareConfig
    from platform.data.subwords import SubwordConfig

    out = tmp_path_factory.mktemp("demo") / "dataset"
    config = PrepareConfig(src_lang=demo.SRC_LANG, tgt_lang=demo.TGT_LANG, subwords=SubwordConfig(vocab_size=1000))
    prepare_demo(out, config, demo.DemoConfig(num_train=2000, num_dev=100, num_test=100), progress=False,
                 log=lambda m: None)
    return out


@pytest.fixture(scope="session")
def tanaka_dataset(tanaka, tmp_path_factory) -> Path:
    """The real 50k Tanaka ja-en pairs prepared once per session with the CLI (about 12 s)."""
    out = tmp_path_factory.mktemp("tanaka") / "ja-en"
    result = run_module("platform.prepare", "--train", tanaka / "train", "--dev", tanaka / "dev",
                        "--test", tanaka / "test", "--src", "ja", "--tgt", "en", "--out", out)
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="session")
def postgres():
    """One real PostgreSQL server for the session (a database per test: ``postgres.database(name)``)."""
    from servers import PostgresServer

    require_module("psycopg", "psycopg (the dev extra) is MLflow's PostgreSQL driver")
    server = PostgresServer()
    if server.bin is None:  # as for the shared data: a failure under CI, a skip on a laptop
        fail_or_skip("needs PostgreSQL's server (Debian: apt-get install postgresql)")
    server.start()
    yield server
    server.stop()
