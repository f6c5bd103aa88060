"""An interrupted run never reads passed: SIGINT or SIGTERM in the middle of a world test,
in the pool and in place under torchrun, then merge-junit and the report on its output.

Each test starts pytest (or torchrun) in its own session, waits until every rank is
inside the test, sends the signal to that one process explicitly, and waits with a
timeout: nothing leans on the signal dispositions this process inherited.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from jobs import end_session, torchrun_pytest_cmd

# slow: each test starts pytest, and a pool or torchrun under it
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

# Gloo worlds: the subject is the record of a stopped run. On GPUs an NCCL world waits
# for the GPU leases other tests of the machine hold, and FOUR_WAITS's two workers could
# never both be inside a test on one pair.
SUITE = """
import time
import pytest

@pytest.mark.world(2, backend="gloo")
def test_first(rank):
    pass

@pytest.mark.world(2, backend="gloo", timeout=120)
def test_waits(rank):
    open(f"running{rank}", "w").close()
    time.sleep(100)

@pytest.mark.world(2, backend="gloo")
def test_never_reached(rank):
    pass
"""
PYTEST_ARGS = ["-p", "no:randomly", "-q", "--color=no", "--junitxml=out/junit.xml", "test_suite.py"]
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *PYTEST_ARGS]
RUNS_FOR_S = 1.5


FOUR_WAITS = """
import time
import pytest

@pytest.mark.world(2, backend="gloo", timeout=120)
@pytest.mark.parametrize("n", range(4))
def test_waits(rank, n):
    open(f"running{n}-{rank}", "w").close()
    time.sleep(100)
"""


def _both_ranks_waiting(tmp_path: Path) -> bool:
    return all((tmp_path / f"running{r}").exists() for r in (0, 1))


def _waiting_tests(tmp_path: Path) -> list[int]:
    """The FOUR_WAITS cases both of whose ranks are inside the test."""
    return [n for n in range(4) if all((tmp_path / f"running{n}-{r}").exists() for r in (0, 1))]


def _interrupt(
    tmp_path: Path,
    cmd: list[str],
    signum: int,
    env: dict | None = None,
    source: str = SUITE,
    ready=_both_ranks_waiting,
) -> tuple[int, str]:
    """Run ``cmd`` in its own session; once ``ready`` (both ranks in test_waits), send
    ``signum``."""
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(source))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    job = subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, env=env, preexec_fn=_default_sigint,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not ready(tmp_path):
            if time.monotonic() > deadline or job.poll() is not None:
                pytest.fail(f"the run never had its tests running:\n{end_session(job)}")
            time.sleep(0.1)
        time.sleep(RUNS_FOR_S)  # its JUnit time says how long it ran before the signal
        job.send_signal(signum)
        out, _ = job.communicate(timeout=90)
    finally:
        if job.returncode is None:  # still running, or its output pipe still open
            end_session(job)
    return job.returncode, out.decode()


def _default_sigint() -> None:
    """An ignored SIGINT is inherited through exec (a shell's background job has one, and
    Python then installs no KeyboardInterrupt handler): the run under test gets the default
    disposition whatever this process inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _rankgate(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rankgate.cli", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


def _report_reads_incomplete(junit: Path, totals: str) -> None:
    report = _rankgate("report", str(junit), "--out", "rep", cwd=junit.parent.parent)
    assert report.returncode == 1, report.stderr
    assert report.stdout.startswith(f"rankgate report: INCOMPLETE: {totals}, "), report.stdout


def _cases(path: Path) -> dict[str, ET.Element]:
    return {c.get("name"): c for c in ET.parse(path).getroot().iter("testcase")}


# The controller is slow to read its worker's events (a hook of its own sleeps once the
# first test has ended), so the second test's start still waits in xdist's queue when the
# signal comes.
# In the xdist controller alone, or in a run without workers. (A worker has
# config.workerinput; PYTEST_XDIST_WORKER may be this run's own, inherited.)
IN_THE_CONTROLLER = """
import time
import pytest

def pytest_configure(config):
    global CONTROLLER
    CONTROLLER = not hasattr(config, "workerinput")
"""
BUSY_CONTROLLER = (
    IN_THE_CONTROLLER
    + """
@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid):
    if CONTROLLER and nodeid.endswith("test_first"):
        time.sleep(100)
"""
)
PLAIN_WAIT = """
import time

def test_first():
    pass

def test_waits():
    open("running", "w").close()
    time.sleep(100)
"""


@pytest.mark.parametrize(
    ("signum", "why"),
    [(signal.SIGTERM, "received SIGTERM"), (signal.SIGINT, "received SIGINT (Ctrl-C)")],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_to_a_pool_run_leaves_a_junit_that_reads_incomplete(tmp_path, signum, why):
    code, out = _interrupt(tmp_path, PYTEST, signum)
    assert code != 0, out
    junit = tmp_path / "out" / "junit.xml"
    cases = _cases(junit)
    assert sorted(cases) == ["test_first", "test_never_reached", "test_waits"], out  # no nameless
    stopped = f"{why} while test_suite.py::test_waits ran"
    assert cases["test_waits"].find("failure").get("message") == (
        f"interrupted: {stopped}; the test did not end"
    )
    assert float(cases["test_waits"].get("time")) >= RUNS_FOR_S
    assert cases["test_never_reached"].find("error").get("message") == (
        f'failed on setup with "not run: interrupted: {stopped}"'
    )
    assert f"rankgate: interrupted: {stopped}; 1 later test(s) not run" in out
    # pytest's own count was "1 passed" (green): the terminal counts what the JUnit holds.
    (stats,) = [line for line in out.splitlines() if " in " in line and "passed" in line]
    assert re.fullmatch(r"1 failed, 1 passed, 1 not run in [\d.]+s", stats), out
    _report_reads_incomplete(junit, "3 tests: 1 passed, 1 failed, 0 error, 1 not run")


def test_sigterm_to_an_xdist_run_fails_each_running_test_and_lists_the_rest(tmp_path):
    # The controller runs no test: it learns from its two workers which tests ran. Room
    # for both workers' world(2) pools at once: under a budget of the CPUs (2 here) one
    # worker would run the four tests one after the other.
    cmd = [*PYTEST, "-n", "2", "--rankgate-max-ranks=4"]
    code, out = _interrupt(
        tmp_path, cmd, signal.SIGTERM, source=FOUR_WAITS,
        ready=lambda path: len(_waiting_tests(path)) == 2,
    )  # fmt: skip
    assert code != 0, out
    running = [f"test_suite.py::test_waits[{n}]" for n in _waiting_tests(tmp_path)]
    assert len(running) == 2, out  # one test at a time on each worker
    stopped = {
        f"received SIGTERM while {', '.join(order)} ran" for order in (running, running[::-1])
    }
    junit = tmp_path / "out" / "junit.xml"
    cases = [c for c in ET.parse(junit).getroot().iter("testcase")]
    assert sorted(c.get("name") or "" for c in cases) == [f"test_waits[{n}]" for n in range(4)]
    (why,) = {
        m.removeprefix("interrupted: ").removesuffix("; the test did not end")
        for c in cases if (m := (c.find("failure") is not None and c.find("failure").get("message")))
    }  # fmt: skip
    assert why in stopped, out
    for case in cases:
        nodeid = f"test_suite.py::{case.get('name')}"
        if nodeid in running:
            assert (
                case.find("failure").get("message") == f"interrupted: {why}; the test did not end"
            )
            assert float(case.get("time")) >= RUNS_FOR_S
        else:
            assert case.find("error").get("message") == (
                f'failed on setup with "not run: interrupted: {why}"'
            )
    assert f"rankgate: interrupted: {why}; 2 later test(s) not run" in out
    assert re.search(r"^2 failed, 2 not run in [\d.]+s", out, re.MULTILINE), out
    _report_reads_incomplete(junit, "4 tests: 0 passed, 2 failed, 0 error, 2 not run")


def test_sigint_to_torchrun_leaves_every_rank_junit_saying_interrupted(tmp_path):
    cmd = torchrun_pytest_cmd(*PYTEST_ARGS)
    code, out = _interrupt(tmp_path, cmd, signal.SIGINT)  # Ctrl-C, sent to torchrun alone
    assert code != 0, out
    for rank in (0, 1):
        cases = _cases(tmp_path / "out" / f"junit.rank{rank}.xml")
        why = (
            f"rank {rank} received SIGINT (Ctrl-C, or the launcher passing it on) "
            "while test_suite.py::test_waits ran"
        )
        assert cases["test_waits"].find("failure").get("message") == f"interrupted: {why}"
        assert float(cases["test_waits"].get("time")) >= RUNS_FOR_S  # not 0.000
        assert cases["test_never_reached"].find("error").get("message") == (
            f'failed on setup with "not run: {why}"'
        )
    merged = _rankgate("merge-junit", "out", cwd=tmp_path)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert "FAILED test_suite.py::test_waits: ranks 0, 1 interrupted" in merged.stdout
    assert "rankgate merge-junit: INCOMPLETE: rank 0 received SIGINT" in merged.stdout
    assert "1 passed, 1 failed, 0 error, 0 skipped, 0 xfailed, 0 xpassed, 1 not run" in (
        merged.stdout
    )
    report = _rankgate("report", "out", "--out", "rep", cwd=tmp_path)
    assert report.returncode == 1, report.stderr
    assert report.stdout.startswith("rankgate report: INCOMPLETE: 3 tests: 1 passed"), report.stdout


def test_sigterm_to_rankgate_run_leaves_a_report_that_reads_incomplete(tmp_path):
    # `rankgate run` passes the signal on to its pytest, which records the test it stopped.
    env = {**os.environ, "PYTEST_ADDOPTS": "-p no:randomly -p no:cacheprovider"}
    cmd = [sys.executable, "-m", "rankgate.cli", "run", "--file", "test_suite.py", "--out", "out"]
    code, out = _interrupt(tmp_path, cmd, signal.SIGTERM, env=env)
    assert code != 0, out
    report = _rankgate("report", "--out", "out", cwd=tmp_path)
    assert report.returncode == 1, report.stderr
    assert report.stdout.startswith(
        "rankgate report: INCOMPLETE: 3 tests: 1 passed, 1 failed, 0 error, 1 not run, "
    ), report.stdout


def test_sigterm_while_the_xdist_controller_has_not_read_a_start_names_that_test(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(BUSY_CONTROLLER))
    code, out = _interrupt(
        tmp_path, [*PYTEST, "-n", "1"], signal.SIGTERM, source=PLAIN_WAIT,
        ready=lambda path: (path / "running").exists(),
    )  # fmt: skip
    assert code != 0, out
    stopped = "received SIGTERM while test_suite.py::test_waits ran"
    cases = _cases(tmp_path / "out" / "junit.xml")
    assert sorted(cases) == ["test_first", "test_waits"], out
    assert list(cases["test_first"]) == [], out  # passed: no failure, error or skip inside
    results = [(c.tag, c.get("message")) for c in cases["test_waits"]]
    assert results == [("failure", f"interrupted: {stopped}; the test did not end")], out
    assert f"rankgate: interrupted: {stopped}; 0 later test(s) not run" in out


# Ctrl-C in the controller once a test's teardown report is in, before its logfinish.
STOPPED_AT_LOGFINISH = (
    IN_THE_CONTROLLER
    + """
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logfinish(nodeid):
    if CONTROLLER:
        raise KeyboardInterrupt
"""
)


def _stopped_at_logfinish(tmp_path: Path, test_body: str, *args: str) -> tuple[str, dict]:
    """A run of one test, test_first, stopped by Ctrl-C at its first logfinish: the
    output, and its JUnit file's test cases (pytest's exit code is 2, interrupted)."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent(STOPPED_AT_LOGFINISH))
    (tmp_path / "test_suite.py").write_text(f"def test_first():\n    {test_body}\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [*PYTEST, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    return out, _cases(tmp_path / "out" / "junit.xml")


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["in-process", "xdist"])
def test_a_stop_after_a_tests_last_report_leaves_it_passed(tmp_path, workers):
    out, cases = _stopped_at_logfinish(tmp_path, "pass", *workers)
    assert sorted(cases) == ["test_first"], out
    assert list(cases["test_first"]) == [], out  # passed: no failure, error or skip inside
    why = "received SIGINT (Ctrl-C) between tests"
    assert f"rankgate: interrupted: {why}; 0 later test(s) not run" in out
    properties = {
        p.get("name"): p.get("value")
        for p in ET.parse(tmp_path / "out" / "junit.xml").iter("property")
    }
    assert properties["rankgate.interrupted"] == why, properties


def test_a_stop_between_a_rerun_and_its_next_attempt_fails_the_test(tmp_path):
    """pytest-rerunfailures's first attempt failed ("rerun"), its last report is in, and the
    stop comes before the next attempt: the test did not end."""
    pytest.importorskip("pytest_rerunfailures")
    out, cases = _stopped_at_logfinish(tmp_path, "assert False", "--reruns", "1")
    stopped = "received SIGINT (Ctrl-C) while test_suite.py::test_first ran"
    results = [(c.tag, c.get("message")) for c in cases["test_first"]]
    assert results == [("failure", f"interrupted: {stopped}; the test did not end")], out
    assert f"rankgate: interrupted: {stopped}; 0 later test(s) not run" in out
