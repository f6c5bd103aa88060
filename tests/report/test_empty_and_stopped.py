"""Real runs that must never read passed: a selection that ran no test, and a gate
stopped by SIGINT or SIGTERM after some of its tests ran (the gate rewrites its page on
the way out: its table, gate.json, report.html and summary.md say INCOMPLETE)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.dist  # real pytest runs under the executor, xdist workers included

ROOT = Path(__file__).resolve().parents[2]
QUICK_TESTS = 5

CONFTEST = """
import os

import pytest


# The controller's record of each test that ended: what the driver polls. At logfinish,
# after every report of the test (rankgate's record ends a test at its teardown report).
@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid, location):
    if "PYTEST_XDIST_WORKER" not in os.environ:
        with open(os.environ["PLANTED_PROGRESS"], "a") as f:
            f.write(nodeid + "\\n")


def pytest_runtest_logstart(nodeid, location):
    # The controller knows test_long runs (under xdist, once its worker's report of the
    # start arrived, which can trail the test's body): only then can it name it.
    if nodeid.endswith("::test_long") and "PYTEST_XDIST_WORKER" not in os.environ:
        open(os.environ["PLANTED_SEEN"], "w").close()
"""

TESTS = f"""
import os
import time
from pathlib import Path

import pytest


@pytest.mark.unit
@pytest.mark.parametrize("i", range({QUICK_TESTS}))
def test_quick(i):
    pass


@pytest.mark.dist
def test_dist_only():
    pass


@pytest.mark.unit
def test_long():
    Path(os.environ["PLANTED_STARTED"]).touch()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.1)
"""


def _env(work: Path) -> dict[str, str]:
    # Not this run's xdist worker variables: the inner gate's own controller would read as
    # a worker, and its conftest (which records the controller's reports) as not one.
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "GITHUB_STEP_SUMMARY" and not k.startswith("PYTEST_XDIST_")
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["PYTEST_ADDOPTS"] = "-p no:randomly"
    env["RANKGATE_PROGRESS"] = "plain"
    env["PLANTED_PROGRESS"] = str(work / "progress.txt")
    env["PLANTED_STARTED"] = str(work / "started.flag")
    env["PLANTED_SEEN"] = str(work / "seen.flag")
    return env


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A small outside project: five quick unit tests, a dist test, and a long unit test."""
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nrankgate_timeout = 60\nmarkers =\n    unit: u\n    dist: d\n"
    )
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_planted.py").write_text(TESTS)
    return tmp_path


def test_rankgate_run_of_a_selection_that_runs_no_test_is_incomplete(project: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "run", "--markers", "nosuchmarker",
         "--integration", "--file", "tests"],
        cwd=project, env=_env(project), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    reason = (
        "ran no test: pytest selected none by -m '(dist and not gpu) and (nosuchmarker)' tests; "
        "check the markers and paths"
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"rankgate: stage dist INCOMPLETE — {reason}" in done.stderr
    out = project / "out"
    summary = json.loads((out / "report.json").read_text())
    assert (summary["verdict"], summary["ok"]) == ("incomplete", False)
    assert summary["incomplete"] == {
        "interrupted": [], "stages": [f"dist: {reason}"], "never ran": [],
    }  # fmt: skip
    md = (out / "summary.md").read_text()
    assert md.startswith("## rankgate: INCOMPLETE\n")
    assert "| dist | **INCOMPLETE** |" in md
    assert "<title>rankgate report — INCOMPLETE</title>" in (out / "report.html").read_text()


def _default_sigint() -> None:
    """An ignored SIGINT is inherited through exec (a shell's background job has one, and
    Python then installs no KeyboardInterrupt handler: a CI run started with `&` waited out
    the 120 s below): the gate under test gets the default disposition whatever this
    process inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stopped_gate(project: Path, sig: signal.Signals) -> subprocess.CompletedProcess:
    """A gate (env-check, unit) in its own session, sent ``sig`` once the five quick tests
    have ended and the long one runs, as its body and the stage's controller both know:
    polled from pytest's own reports, never slept on."""
    code = (
        "from pathlib import Path\n"
        "from rankgate.pipeline import executor\n"
        "executor.run_gate(executor.Options(out_dir=Path('out')), include=('unit',))\n"
    )
    gate = subprocess.Popen(
        [sys.executable, "-c", code], cwd=project, env=_env(project), start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint,
    )  # fmt: skip
    progress, started = project / "progress.txt", project / "started.flag"
    seen = project / "seen.flag"
    try:
        deadline = time.monotonic() + 300
        while not (
            started.exists()
            and seen.exists()
            and progress.exists()
            and len(progress.read_text().splitlines()) >= QUICK_TESTS
        ):
            assert gate.poll() is None, gate.communicate()
            assert time.monotonic() < deadline, "the quick tests never ended"
            time.sleep(0.1)
        os.kill(gate.pid, sig)  # the gate alone: it ends the pytest tree itself
        stdout, stderr = gate.communicate(timeout=120)
    finally:
        if gate.poll() is None:
            gate.kill()
            gate.wait()
    return subprocess.CompletedProcess(gate.args, gate.returncode, stdout, stderr)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_gate_rewrites_its_page_incomplete(project: Path, sig: signal.Signals) -> None:
    done = _stopped_gate(project, sig)
    assert done.returncode == -sig, done.stderr[-3000:]  # it dies of the signal, as it would
    out = project / "out"
    reason = (
        f"stopped by {sig.name} while it ran: {QUICK_TESTS} tests ended ({QUICK_TESTS} passed); "
        "tests.test_planted::test_long was running"
    )
    # The table, on stdout, with the stage that was running.
    assert "unit       INCOMPLETE" in done.stdout
    assert "gate — 1 passed, 0 failed, 1 incomplete, 0 skipped (stages)" in done.stdout
    assert f"gate INCOMPLETE — stopped by {sig.name} while unit ran" in done.stdout
    # gate.json: every outcome of this run.
    rows = json.loads((out / "gate.json").read_text())
    assert [(r["stage"], r["status"]) for r in rows] == [
        ("env-check", "passed"), ("unit", "incomplete"),
    ]  # fmt: skip
    assert rows[1]["reason"] == reason
    # The page, rewritten on the way out: INCOMPLETE, the tests that ran, the stage.
    summary = json.loads((out / "report.json").read_text())
    assert (summary["verdict"], summary["ok"]) == ("incomplete", False)
    assert summary["incomplete"]["stages"] == [f"unit: {reason}"]
    assert summary["incomplete"]["interrupted"] == []  # no stage left marked running
    assert summary["totals"]["passed"] == QUICK_TESTS
    md = (out / "summary.md").read_text()
    assert md.startswith("## rankgate: INCOMPLETE\n")
    assert f"| unit | **INCOMPLETE** | {QUICK_TESTS} passed, 1 failed |" in md
    assert reason in md
    assert "NEVER RAN" not in md
    html = (out / "report.html").read_text()
    assert "<title>rankgate report — INCOMPLETE</title>" in html
    assert reason in html
