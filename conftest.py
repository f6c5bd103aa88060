"""Project-wide test configuration."""

import os
import warnings

import pytest

from rankgate.harness.pool.xdist_ranks import fork_server_of_worker
from rankgate.launch.env import detect_launch
from tests.warmstart import WARM_PYTHON

# pytester drives inner pytest runs in the harness suites; pytest only accepts
# pytest_plugins in the top-level conftest. tests/leftovers.py fails a run that leaves
# rankgate-* folders in its (private) temp dir.
pytest_plugins = ["pytester", "tests.leftovers"]

# pytest-randomly (dev extra, for the one test that runs it) would shuffle every pytest
# run the tests start: blocked in them all, as pyproject's addopts blocks it here.
NO_RANDOM_ORDER = "-p no:randomly"
os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} {NO_RANDOM_ORDER}".strip()

# Plugins of the dev install that the processes the tests start block unless their test
# asks (a fixture of the plugin's name, below): hypothesis's imports most of hypothesis in
# every session's terminal summary (0.9 of a bare session's 1.8 CPU-s here); anyio's
# imports anyio and its asyncio backend as it loads (10-30 ms of a warm session's 0.2 CPU-s).
# Each is paid by the hundreds of inner sessions and launched ranks the tests start, none
# of which draws an example or runs a coroutine test unless its test says so
# (tests/harness/test_plugins_hypothesis.py, test_test_styles.py, test_marker.py's async
# world tests). Blocked for the processes the tests start, after xdist has started its
# workers: the project's own @given tests keep the plugin and its health checks.
BLOCKED_IN_INNER_RUNS = {"hypothesis": "-p no:hypothesispytest", "anyio": "-p no:anyio"}


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session: pytest.Session):
    result = yield
    addopts = os.environ["PYTEST_ADDOPTS"].split()
    for block in BLOCKED_IN_INNER_RUNS.values():
        if block not in " ".join(addopts):
            addopts += block.split()
    os.environ["PYTEST_ADDOPTS"] = " ".join(addopts)
    return result


def _plugin_in_inner_runs(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    addopts = os.environ["PYTEST_ADDOPTS"].replace(BLOCKED_IN_INNER_RUNS[name], "")
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(addopts.split()))


@pytest.fixture
def hypothesis_plugin_in_inner_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pytest runs this test starts load hypothesis's pytest plugin (its health checks
    and reports are what they test)."""
    _plugin_in_inner_runs("hypothesis", monkeypatch)


@pytest.fixture
def anyio_plugin_in_inner_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pytest runs this test starts load anyio's pytest plugin (coroutine tests)."""
    _plugin_in_inner_runs("anyio", monkeypatch)


# A deprecation warning raised from rankgate's own modules is an error: pyproject's
# filterwarnings covers collection and the tests (pytest applies it only there); this
# covers the hooks around them (e.g. an in-place run's session start). Warnings rankgate
# gives about a user's test (a world test returning a value) stay warnings.
RANKGATE_MODULES = r"rankgate(\.|$)"
DEPRECATIONS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


def pytest_configure(config: pytest.Config) -> None:
    # The Python programs tests start (tests/warmstart.py) fork from the run's server;
    # in place they start cold (a server a test started is a process it left running).
    run_server = fork_server_of_worker(config)
    if run_server is not None:
        WARM_PYTHON.fork_from(run_server)
    if detect_launch() is not None:
        WARM_PYTHON.turn_off()
    for category in DEPRECATIONS:
        warnings.filterwarnings("error", category=category, module=RANKGATE_MODULES)


@pytest.fixture
def pytester(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> pytest.Pytester:
    inner_options = [NO_RANDOM_ORDER]  # pytester clears the variable
    for name, block in BLOCKED_IN_INNER_RUNS.items():
        if f"{name}_plugin_in_inner_runs" not in request.fixturenames:
            inner_options.append(block)
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(inner_options))
    return pytester


# xdist hands tests to its workers in collection order, in chunks: a file of inner sessions
# that wait out planted hangs and crashes, collected late, ran on one worker after the
# others had ended. These dist files (the longest in one process, benchmarks/results/cpu/
# loop-2026-12-01/dist-quick.txt) go first, each kept whole: the quick dist under -n 3 took
# 134 s instead of 165 s there, the quick gate 213 s instead of 229 (tests/test_long_first.py).
# Measured, not derived: when dist's files change much, measure again and rewrite the list.
LONG_FIRST = (
    "tests/harness/test_ledger_process_group.py",
    "tests/harness/test_faults.py",
    "tests/harness/test_planted_divergences.py",
    "tests/harness/test_hostile.py",
    "tests/harness/test_ledger_roots.py",
    "tests/report/test_empty_and_stopped.py",
    "tests/harness/test_plugins_timeout.py",
    "tests/bench/test_ledger_pool_variants.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    first = {path: place for place, path in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: first.get(item.nodeid.split("::", 1)[0], len(first)))
