"""xdist's workers forked from the run's fork server: torch imported once for the run, and
a worker that crashes reads as one started cold does."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.slow]  # pytest runs of their own

# Whether torch was imported before pytest imported this conftest (a forked worker has
# it from the server), and whether the worker's parent is the controller (a cold one's
# is; a forked one's is the fork server).
CONFTEST = """
import os, sys
from pathlib import Path

TORCH_BEFORE_PYTEST = "torch" in sys.modules


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        (config.rootpath / "controller.pid").write_text(str(os.getpid()))
"""

# Set as the session starts, after the run's fork server started: what DeepSpeed's import
# does (pytest-randomly's seeder runs it there; torch reads the variable only when asked),
# and a variable torch reads at import.
SETS_A_VARIABLE_TORCH_READS_WHEN_ASKED = """

def pytest_sessionstart(session):
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
"""
SETS_A_VARIABLE_READ_AT_IMPORT = """

def pytest_sessionstart(session):
    os.environ["TORCH_SHOW_CPP_STACKTRACES"] = "1"
"""

WHERE_AM_I = """
import os
from pathlib import Path

from conftest import TORCH_BEFORE_PYTEST


def test_where(tmp_path_factory, pytestconfig):
    controller = int((pytestconfig.rootpath / "controller.pid").read_text())
    out = tmp_path_factory.getbasetemp().parent / os.environ["PYTEST_XDIST_WORKER"]
    seen = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    out.write_text(f"{TORCH_BEFORE_PYTEST} {os.getppid() == controller} {seen}")
"""

FORKED = "rankgate: -n 2: *; workers start forked from the run's fork server"


@pytest.mark.parametrize(
    ("ini", "conftest", "expected", "lines"),
    [
        ("", "", "True False None", [FORKED]),
        ("rankgate_cold_workers = true", "", "False True None",
         ["rankgate: -n 2: *; workers start cold (rankgate_cold_workers)"]),
        ("", SETS_A_VARIABLE_TORCH_READS_WHEN_ASKED, "True False 1", [FORKED]),
        ("", SETS_A_VARIABLE_READ_AT_IMPORT, "False True None",
         [FORKED, "rankgate: -n 2: the workers start cold, each importing torch itself: "
                  "TORCH_SHOW_CPP_STACKTRACES differs from the warm server's (changed after "
                  "the run's fork server started)"]),
    ],
    ids=["forked", "cold", "forked-after-a-variable-read-when-asked", "cold-after-one-read-at-import"],
)  # fmt: skip
def test_workers_start_forked_from_the_fork_server_unless_told_or_made_cold(
    pytester, monkeypatch, ini, conftest, expected, lines
):
    for name in ("PYTORCH_NVML_BASED_CUDA_CHECK", "TORCH_SHOW_CPP_STACKTRACES"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makeconftest(CONFTEST + conftest)
    pytester.makepyfile(test_where=WHERE_AM_I)
    base = pytester.path / "bt"
    # A module of rankgate imported before pytest starts cannot be assert-rewritten:
    # pytest would warn, and -W error makes that a failure.
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "2", "--basetemp", str(base),
        "-W", "error::pytest.PytestAssertRewriteWarning", timeout=300,
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(lines)
    ran = [p for p in base.iterdir() if p.name.startswith("gw")]
    assert [p.read_text() for p in ran] == [expected]
    says_cold = any("the workers start cold" in line for line in lines)
    assert ("the workers start cold" in result.stdout.str()) == says_cold


CRASH = """
import os, signal

import pytest


@pytest.mark.world(2)
@pytest.mark.parametrize("i", range(2))
def test_world(rank, i):
    pass


def test_crash():
    os.kill(os.getpid(), signal.SIGKILL)


def test_after():
    pass
"""


@pytest.mark.parametrize("ini", ["", "rankgate_cold_workers = true"], ids=["forked", "cold"])
def test_a_worker_killed_mid_test_is_reported_and_replaced_as_a_cold_one_is(pytester, ini):
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_crash=CRASH)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "2", timeout=300
    )
    result.assert_outcomes(passed=3, failed=1)
    # The other worker's progress dots may come first on the line (CI: "..[gw0] node down").
    result.stdout.fnmatch_lines(
        ["*[[]gw?[]] node down: Not properly terminated", "F", "replacing crashed worker gw?"]
    )
    result.stdout.fnmatch_lines(["worker 'gw?' crashed while running 'test_crash.py::test_crash'"])
