"""In place, two runs into one JUnit folder: merge-junit and the report read one run's files.

A passing run writes ``out/junit.rank*.xml``; a second run into the same folder is
SIGKILLed mid-test (the OOM killer, a lost node, a CI hard kill), leaving only its
results files. Each test starts pytest on 2 gloo ranks with torchrun, for real.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from jobs import end_session, torchrun_pytest_cmd

from rankgate.harness.rankfiles import RUN_ID_PROPERTY

# slow: each test starts torchrun twice, and pytest on every rank
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]


SUITE = """
import os
import time
import pytest

@pytest.mark.world(2)
def test_first(rank):
    pass

@pytest.mark.world(2, timeout=120)
def test_sleeps(rank):
    if os.environ.get("PLANTED_SLEEP") == "1":
        with open(f"running{rank}", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(100)

@pytest.mark.world(2)
def test_after(rank):
    pass
"""


UNFINISHED = (
    "rank 0 ended inside test_suite::test_sleeps and wrote no JUnit file (killed, os._exit "
    "or the OOM killer): its run did not finish (junit.rank0.jsonl)"
)
"""Why a killed run reads INCOMPLETE: rank 0's results file (rank 1's says the same)."""


def _rankgate(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rankgate.cli", *args], cwd=cwd, capture_output=True, text=True
    )


def _run_id(path: Path) -> str:
    (value,) = [
        p.get("value") for p in ET.parse(path).getroot().iter("property")
        if p.get("name") == RUN_ID_PROPERTY
    ]  # fmt: skip
    return value


def _passing_run(tmp_path: Path) -> list[str]:
    """A passing run of SUITE into out/; returns its command, for the run to kill."""
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SUITE))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    cmd = torchrun_pytest_cmd("-q", "--color=no", "--junitxml=out/junit.xml", "test_suite.py")
    first = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    return cmd


def _kill_once_held(cmd: list[str], cwd: Path, held: list[Path], where: str, env=None) -> None:
    """Start ``cmd``, wait until each rank wrote its pid into its file in ``held`` (the
    ranks are held ``where``), then SIGKILL the launcher and every rank: a hard kill, no
    rank gets to write anything more (torchrun's ranks run in sessions of their own, so
    each is killed by its pid)."""
    time.sleep(0.05)  # this run's files are newer than the last's, whatever the clock
    job = subprocess.Popen(
        cmd, cwd=cwd, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not all(p.is_file() and p.read_text() for p in held):
            if time.monotonic() > deadline or job.poll() is not None:
                pytest.fail(f"the ranks never reached {where}:\n{end_session(job)}")
            time.sleep(0.1)
        os.kill(job.pid, signal.SIGKILL)
        for path in held:
            os.kill(int(path.read_text()), signal.SIGKILL)
        job.wait(timeout=30)
    finally:
        end_session(job)


def _killed_run_over_a_passing_one(tmp_path: Path) -> str:
    """A passing run into out/, then a second one SIGKILLed inside test_sleeps; returns
    the first run's id."""
    cmd = _passing_run(tmp_path)
    old = _run_id(tmp_path / "out" / "junit.rank0.xml")
    assert _run_id(tmp_path / "out" / "junit.rank1.xml") == old  # one id per launch
    running = [tmp_path / f"running{r}" for r in (0, 1)]
    env = {**os.environ, "PLANTED_SLEEP": "1"}
    _kill_once_held(cmd, tmp_path, running, "test_sleeps", env=env)
    return old


def test_a_killed_run_over_a_passing_one_never_reads_passed(tmp_path):
    old = _killed_run_over_a_passing_one(tmp_path)
    out = tmp_path / "out"
    # The first run's JUnit files are still there; the second left its results files
    # (and the crash records its ranks began, killed before they could remove them).
    assert sorted(p.name for p in out.glob("junit.rank*") if p.suffix != ".crash") == [
        "junit.rank0.jsonl", "junit.rank0.plan", "junit.rank0.xml",
        "junit.rank1.jsonl", "junit.rank1.plan", "junit.rank1.xml",
    ]  # fmt: skip
    merged = _rankgate(tmp_path, "merge-junit", "out")
    assert merged.returncode == 1, merged.stdout + merged.stderr
    lines = merged.stdout.splitlines()
    (note,) = [line for line in lines if "holds files of 2 runs" in line]
    assert note.startswith("rankgate merge-junit: out holds files of 2 runs: read run ")
    assert note.endswith(
        f"(the newest); left out {old} (junit.rank0.xml, junit.rank1.xml); "
        "--run-id ID reads another"
    )
    assert "FAILED test_suite.py::test_sleeps: ranks 0, 1 crashed" in lines
    assert (
        "NOT RUN test_suite.py::test_after: ranks 0, 1 not run "
        "(rank 0 ended before this test began)"
    ) in lines
    # INCOMPLETE, not FAILED: the ranks were killed, the run did not finish (test_after
    # never ran), as a signal-stopped run; test_sleeps, where they died, counts as failed.
    assert lines[-1] == (
        f"rankgate merge-junit: INCOMPLETE: {UNFINISHED} (and 1 more); 3 tests on ranks 0, 1 "
        "of world 2: 1 passed, 1 failed, 0 error, 0 skipped, 0 xfailed, 0 xpassed, 1 not run"
    )
    report = _rankgate(tmp_path, "report", "out", "--out", "page")
    assert report.returncode == 1, report.stdout + report.stderr
    first, verdict = report.stdout.splitlines()
    assert first == note.replace("rankgate merge-junit:", "rankgate report:", 1)
    assert verdict.startswith(
        "rankgate report: INCOMPLETE: 3 tests: 1 passed, 1 failed, 0 error, 1 not run, "
        "0 skipped, 0 xfailed, 0 xpassed;"
    )
    # The earlier run, named, is read as it was: it passed.
    named = _rankgate(tmp_path, "merge-junit", "out", "--run-id", old)
    assert named.returncode == 0, named.stdout + named.stderr
    assert f"read run {old} (as named)" in named.stdout
    assert "3 passed" in named.stdout.splitlines()[-1]
    unknown = _rankgate(tmp_path, "merge-junit", "out", "--run-id", "nosuch")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("rankgate merge-junit: error: no file of run 'nosuch' in out")


def test_a_killed_runs_results_files_alone_count_its_later_tests_not_run(tmp_path):
    _killed_run_over_a_passing_one(tmp_path)
    alone = tmp_path / "alone"
    alone.mkdir()
    for path in (tmp_path / "out").glob("junit.rank*.jsonl"):
        shutil.copy(path, alone / path.name)
    merged = _rankgate(tmp_path, "merge-junit", "alone")
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert "holds files of" not in merged.stdout  # one run only: nothing to say
    assert merged.stdout.splitlines()[-1] == (
        f"rankgate merge-junit: INCOMPLETE: {UNFINISHED} (and 1 more); 3 tests on ranks 0, 1 "
        "of world 2: 1 passed, 1 failed, 0 error, 0 skipped, 0 xfailed, 0 xpassed, 1 not run"
    )


SETUP = """
import os
import time


def wait(rank):
    with open(f"setup{rank}", "w") as f:
        f.write(str(os.getpid()))
    time.sleep(100)
"""


def test_a_run_killed_before_its_first_result_never_reads_as_the_last_run(tmp_path):
    # The second run's ranks are held in rankgate_worker_setup (before their group, before
    # any test) and SIGKILLed there: they wrote nothing but the launch's first record.
    cmd = _passing_run(tmp_path)
    (tmp_path / "slow_setup.py").write_text(textwrap.dedent(SETUP))
    assert _rankgate(tmp_path, "merge-junit", "out").returncode == 0
    held = [*cmd[:-1], "-o", "rankgate_worker_setup=slow_setup:wait", "test_suite.py"]
    setups = [tmp_path / f"setup{r}" for r in (0, 1)]
    _kill_once_held(held, tmp_path, setups, "their set-up")
    merged = _rankgate(tmp_path, "merge-junit", "out")
    assert merged.returncode == 1, merged.stdout + merged.stderr
    last = merged.stdout.splitlines()[-1]
    assert last.startswith(
        "rankgate merge-junit: INCOMPLETE: rank 0 started a new run into this folder at "
    )
    assert last.endswith(
        " and ended before it recorded any result (killed, or stopped by an error before its "
        "tests: see its log); the folder's earlier results are not this run's "
        "(junit.rank0.jsonl) (and 1 more); 0 tests on ranks 0, 1 of world 2: 0 passed, "
        "0 failed, 0 error, 0 skipped, 0 xfailed, 0 xpassed, 0 not run"
    )
    report = _rankgate(tmp_path, "report", "out", "--out", "page")
    assert report.returncode == 1, report.stdout + report.stderr
    assert report.stdout.splitlines()[-1].startswith("rankgate report: INCOMPLETE: 0 tests: ")
