"""In place, no verdict is lost: a rank that dies, a launcher's SIGTERM, -x, a hang.

Each test starts pytest on 2 gloo ranks with torchrun, for real, and checks what the
terminal, each rank's JUnit file and merge-junit say.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from jobs import end_session, run_torchrun_pytest, torchrun_pytest_cmd

from rankgate.harness import ledger
from rankgate.harness.leaks import running
from rankgate.report.junit import merge_junit
from tests.once import once_per_run

# slow: each test starts torchrun or mpirun, and pytest on every rank
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]


def _write(tmp_path: Path, source: str, ini: str = "") -> None:
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(source))
    (tmp_path / "pytest.ini").write_text("[pytest]\n" + ini)


def _case(path: Path, name: str) -> ET.Element:
    (case,) = [c for c in ET.parse(path).getroot().iter("testcase") if c.get("name") == name]
    return case


CRASH = """
import os
import time
import pytest

@pytest.mark.world(2)
def test_first(rank):
    print(f"first on rank {rank}")

@pytest.mark.world(2, timeout=60)
def test_dies_on_rank_1(rank):
    if rank == 1:
        os._exit(7)
    time.sleep(50)  # the launcher's SIGTERM comes long before

@pytest.mark.world(2)
def test_after(rank):
    pass
"""


def test_os_exit_on_one_rank_the_survivor_writes_its_junit_naming_the_dead_rank(tmp_path):
    _write(tmp_path, CRASH)
    proc = run_torchrun_pytest(
        tmp_path, "-q", "--color=no", "--junitxml=out/junit.xml", "test_suite.py"
    )
    out = proc.stdout
    assert proc.returncode != 0
    # Rank 0 (the survivor torchrun sent SIGTERM to) prints its summary, naming the cause.
    cause = (
        "rank 1 crashed (ended without a result: os._exit, a signal or the OOM killer), "
        "and the launcher sent SIGTERM to rank 0 while test_suite.py::test_dies_on_rank_1 ran"
    )
    assert "short test summary info" in out, proc.stderr
    assert "FAILED test_suite.py::test_dies_on_rank_1 - rank 1 crashed" in out
    assert "ERROR test_suite.py::test_after - not run: rank 1 crashed" in out
    assert "1 failed, 1 passed, 1 error" in out
    failure = _case(tmp_path / "out" / "junit.rank0.xml", "test_dies_on_rank_1").find("failure")
    assert failure.get("message") == cause
    # Rank 1 wrote no JUnit file; its results file holds what it finished and where it died.
    assert not (tmp_path / "out" / "junit.rank1.xml").exists()
    assert (tmp_path / "out" / "junit.rank1.jsonl").is_file()
    assert not (tmp_path / "out" / "junit.rank0.jsonl").exists()  # its JUnit file holds it all
    merged = merge_junit([tmp_path / "out"])
    tests = {t.name: t for t in merged.tests}
    assert {n: t.verdict for n, t in tests.items()} == {
        "test_first": "passed", "test_dies_on_rank_1": "failed", "test_after": "not run",
    }  # fmt: skip
    assert tests["test_dies_on_rank_1"].results[1].message == (
        "crashed on rank 1: the rank ended while running this test"
    )
    assert tests["test_first"].results[1].system_out.strip() == "first on rank 1"
    cli = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "merge-junit", "out"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert cli.returncode == 1, cli.stderr
    # pytest's node ids, as the terminal says them
    assert (
        "FAILED test_suite.py::test_dies_on_rank_1: rank 1 crashed; rank 0 failed\n" in cli.stdout
    )
    # Rank 1 died first; its results file lists the test it never began: not run there too.
    assert "NOT RUN test_suite.py::test_after: ranks 0, 1 not run (rank 1 crashed" in cli.stdout
    assert "while test_suite.py::test_dies_on_rank_1 ran; 1 later test not run" in proc.stderr


SIGNALLED = """
import os
import time
import pytest

@pytest.mark.world(2, timeout=120)
def test_waits(rank):
    open(f"running{rank}", "w").close()
    time.sleep(100)

def test_never_reached():
    pass
"""


def test_sigterm_to_the_job_leaves_every_rank_junit_naming_the_signal(tmp_path):
    _write(tmp_path, SIGNALLED)
    cmd = torchrun_pytest_cmd("-q", "--color=no", "--junitxml=out/junit.xml", "test_suite.py")
    job = subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 90
    while not all((tmp_path / f"running{r}").exists() for r in (0, 1)):
        if time.monotonic() > deadline or job.poll() is not None:
            pytest.fail(f"the ranks never reached test_waits:\n{end_session(job)}")
        time.sleep(0.1)
    job.send_signal(signal.SIGTERM)  # what a CI runner's cancel does to the job's launcher
    try:
        out, err = (s.decode() for s in job.communicate(timeout=60))
    finally:
        if job.returncode is None:
            end_session(job)
    assert job.returncode != 0
    for rank in (0, 1):
        path = tmp_path / "out" / f"junit.rank{rank}.xml"
        assert path.is_file(), err
        failure = _case(path, "test_waits").find("failure")
        assert failure.get("message") == (
            f"interrupted: rank {rank} received SIGTERM (the launcher or the CI stopped the "
            "job) while test_suite.py::test_waits ran"
        )
    # The plain test is rank 0's share (one rank runs it in place): not run there only.
    error = _case(tmp_path / "out" / "junit.rank0.xml", "test_never_reached").find("error")
    assert '"not run: rank 0 received SIGTERM' in error.get("message")
    rank1 = ET.parse(tmp_path / "out" / "junit.rank1.xml").getroot().iter("testcase")
    assert "test_never_reached" not in [c.get("name") for c in rank1]
    assert "1 failed, 1 error" in out
    assert merge_junit([tmp_path / "out"]).verdicts == {
        "test_suite::test_waits": "failed", "test_suite::test_never_reached": "not run",
    }  # fmt: skip


STOP_FIRST = """
import pytest

@pytest.mark.world(2)
def test_fails_on_rank_1(rank):
    assert rank == 0

@pytest.mark.world(2)
def test_second(rank):
    open(f"second-ran-on-rank{rank}", "w").close()
"""


@pytest.mark.parametrize("stop", ["-x", "--maxfail=1"])
def test_x_stops_every_rank_after_the_same_test(tmp_path, stop):
    _write(tmp_path, STOP_FIRST)
    proc = run_torchrun_pytest(
        tmp_path, "-q", "--color=no", stop, "--junitxml=out/junit.xml", "test_suite.py"
    )
    assert proc.returncode == 1
    assert "stopping after 1 failures (counted on every rank)" in proc.stdout
    assert "1 failed, 1 error in" in proc.stdout  # the error: the test the stop left
    assert list(tmp_path.glob("second-ran-on-rank*")) == []
    for rank in (0, 1):  # both wrote their JUnit file, naming the test they did not run
        names = [
            c.get("name")
            for c in ET.parse(tmp_path / "out" / f"junit.rank{rank}.xml").iter("testcase")
        ]
        assert names == ["test_fails_on_rank_1", "test_second"]
    assert merge_junit([tmp_path / "out"]).verdicts == {
        "test_suite::test_fails_on_rank_1": "failed",
        "test_suite::test_second": "not run",
    }


VERDICTS = """
import pytest

@pytest.mark.world(2)
def test_wrong_on_rank_1(rank):
    print(f"value seen on rank {rank}")
    assert rank == 0, "a planted wrong value"

@pytest.mark.world(2)
def test_fails_on_both(rank):
    assert rank < 0

@pytest.mark.world(2)
def test_fine(rank):
    print(f"fine on rank {rank}")
"""


@pytest.fixture(scope="module")
def verdicts_run(request, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """VERDICTS under torchrun, once per run (tests/once.py): its folder and the run. Both
    tests below read it: -v with -c and -o for the first, -rA and a timeout for the second."""

    def launch():
        folder = tmp_path_factory.mktemp("verdicts")
        _write(folder, VERDICTS)
        proc = run_torchrun_pytest(
            folder, "-v", "-rA", "--color=no", "-c", "pytest.ini", "-o",
            "console_output_style=classic", "--rankgate-timeout=60", "--junitxml=out/junit.xml",
            "test_suite.py",
        )  # fmt: skip
        return folder, proc

    return once_per_run(request, launch)


def test_terminal_shows_the_cross_rank_verdict_once_with_every_ranks_output(verdicts_run):
    tmp_path, proc = verdicts_run
    out = proc.stdout
    assert proc.returncode == 1
    # A failure on rank 1 is a failure on rank 0's terminal, not rank 0's own PASSED.
    assert "test_suite.py::test_wrong_on_rank_1 FAILED" in out
    assert "test_wrong_on_rank_1 PASSED" not in out
    assert "test_suite.py::test_fine PASSED" in out
    # Each test counts once, whatever the number of ranks it failed on.
    assert "2 failed, 1 passed" in out
    assert out.count("FAILED test_suite.py::test_fails_on_both - ") == 1
    assert "FAILED test_suite.py::test_wrong_on_rank_1 - rank 1 failed; rank 0 passed" in out
    # Rank 1's captured output reaches rank 0's report.
    assert "Captured stdout call (rank 1)" in out
    assert "value seen on rank 1" in out
    # The reproduction line carries the run's -p, -c and -o options.
    assert (
        "reproduce: torchrun --standalone --nproc-per-node=2 -m pytest -p no:cacheprovider "
        "-c pytest.ini -o console_output_style=classic 'test_suite.py::test_wrong_on_rank_1'"
    ) in out
    # Rank 1's own terminal (its log) shows the same verdicts.
    log = (tmp_path / "out" / "pytest.rank1.log").read_text()
    assert "test_suite.py::test_wrong_on_rank_1 FAILED" in log
    assert "2 failed, 1 passed" in log
    # Every rank's output is in its own JUnit file and in the merged verdict.
    case = _case(tmp_path / "out" / "junit.rank1.xml", "test_wrong_on_rank_1")
    assert "value seen on rank 1" in case.findtext("system-out")
    merged = {t.name: t for t in merge_junit([tmp_path / "out"]).tests}
    mine = merged["test_wrong_on_rank_1"]
    assert mine.failing_ranks == (1,)
    assert "value seen on rank 0" in mine.results[0].system_out
    assert "value seen on rank 1" in mine.results[1].system_out


def test_with_ra_rank_0_shows_every_ranks_output_and_the_verdict_as_the_pool_does(verdicts_run):
    _, proc = verdicts_run
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    # The short summary names what each rank did, not rank 0's own exception.
    assert "FAILED test_suite.py::test_fails_on_both - ranks 0, 1 failed" in out
    # A passed test's output of every rank, under -rA, as the pool shows it.
    passes = out.split("= PASSES =")[1]
    assert "Captured stdout call (rank 1)" in passes and "fine on rank 1" in passes
    # The reproduction line keeps the run's timeout: a reproduced hang ends as soon.
    assert "'test_suite.py::test_wrong_on_rank_1' --rankgate-seed=0 --rankgate-timeout=60" in out


COLOURED = """
import pytest

@pytest.mark.world(2)
def test_diff(rank):
    print("\\x1b[91mred output\\x1b[0m")
    assert {"a": 1, "rank": rank} == {"a": 2, "rank": rank}
"""


def test_junit_files_carry_no_escape_codes_when_the_suite_forces_colour(tmp_path):
    _write(tmp_path, COLOURED, ini="addopts = --color=yes\n")
    proc = run_torchrun_pytest(tmp_path, "-q", "--junitxml=out/junit.xml", "test_suite.py")
    assert proc.returncode == 1
    assert "\x1b[" in proc.stdout  # the terminal keeps its colours
    for rank in (0, 1):
        text = (tmp_path / "out" / f"junit.rank{rank}.xml").read_text()
        assert "#x1B" not in text and "\x1b" not in text
        assert "red output" in text
        assert "AssertionError" in text
    merge_junit([tmp_path / "out"]).write_xml(tmp_path / "merged.xml")
    assert "#x1B" not in (tmp_path / "merged.xml").read_text()


HANG = """
import subprocess
import time
import pytest

@pytest.mark.world(2, timeout=4)
def test_hangs_with_a_helper(rank):
    helper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    open(f"helper{rank}", "w").write(str(helper.pid))
    time.sleep(1000)

def test_later():
    pass
"""


def test_a_hang_stop_prints_the_summary_and_ends_the_tests_processes(tmp_path):
    _write(tmp_path, HANG)
    proc = run_torchrun_pytest(
        tmp_path, "-q", "--color=no", "--junitxml=out/junit.xml", "test_suite.py"
    )
    assert proc.returncode != 0
    out = proc.stdout
    assert "short test summary info" in out, proc.stderr
    # every rank that hangs is named, as the pool names them
    assert "FAILED test_suite.py::test_hangs_with_a_helper - ranks 0, 1 hung (" in out
    assert "1 failed, 1 error" in out
    pids = [int(p.read_text()) for p in tmp_path.glob("helper*")]
    assert pids
    deadline = time.monotonic() + 5
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in pids if running(p)] == []


CRASH_UNDER_A_COLLECTIVE = """
import os
import pytest
import torch
import torch.distributed as dist

@pytest.mark.world(2, timeout=60)
def test_dies_under_a_collective(rank):
    t = torch.ones(4)
    dist.broadcast(t, src=0)
    if rank == 1:
        os._exit(7)
    dist.all_reduce(t)  # rank 0 waits here for a rank that is gone
"""


def test_a_peer_dying_under_a_collective_names_the_collective_the_survivor_was_in(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(ledger.ENV, "1")  # the collective named is the ledger's, GPUs seen or not
    _write(tmp_path, CRASH_UNDER_A_COLLECTIVE)
    proc = run_torchrun_pytest(
        tmp_path, "-q", "--color=no", "--junitxml=out/junit.xml", "test_suite.py"
    )
    assert proc.returncode != 0
    failure = _case(tmp_path / "out" / "junit.rank0.xml", "test_dies_under_a_collective")
    message = failure.find("failure").get("message")
    # The survivor learns of the death from the launcher's SIGTERM or from gloo (its
    # all_reduce fails: "Connection closed by peer"), whichever comes first: either way
    # its JUnit names the crash, and its own ledger says where it was.
    assert message.startswith("rank 1 crashed (ended without a result"), message
    assert message.endswith(
        "while test_suite.py::test_dies_under_a_collective ran; rank 0 was in all_reduce #2 "
        "(float32[4]) issued at test_suite.py:13"
    ), message


ABORTS_AT_A_KNOWN_LINE = """
import os
import pytest
import torch
import torch.distributed as dist

@pytest.mark.world(2, timeout=60)
def test_aborts_on_rank_1(rank):
    t = torch.ones(4)
    dist.broadcast(t, src=0)
    if rank == 1:
        os.abort()  # line 12: faulthandler writes rank 1's stacks as it dies
    dist.all_reduce(t)  # rank 0 waits here for a rank that is gone
"""


def test_a_rank_that_dies_of_a_fatal_signal_is_named_with_the_line_it_died_on(
    tmp_path, monkeypatch
):
    # The pool names it from the dead rank's stderr; in place each rank keeps its own
    # crash record, which the survivor and merge-junit read.
    monkeypatch.setenv(ledger.ENV, "1")  # rank 0's collective is named whatever the host
    _write(tmp_path, ABORTS_AT_A_KNOWN_LINE)
    proc = run_torchrun_pytest(
        tmp_path, "-q", "--color=no", "--junitxml=out/junit.xml", "test_suite.py"
    )
    assert proc.returncode != 0
    failure = _case(tmp_path / "out" / "junit.rank0.xml", "test_aborts_on_rank_1").find("failure")
    message = failure.get("message")
    assert message.startswith(
        "rank 1 crashed at test_suite.py:12 (Fatal Python error: Aborted), and the launcher "
        "sent SIGTERM to rank 0 while test_suite.py::test_aborts_on_rank_1 ran"
    ) or message.startswith(  # gloo told rank 0 first: it ends itself in the exchange
        "rank 1 crashed at test_suite.py:12 (Fatal Python error: Aborted) while "
        "test_suite.py::test_aborts_on_rank_1 ran"
    ), message
    assert "----- rank 1: its fatal error (junit.rank1.crash) -----" in failure.text
    assert 'test_suite.py", line 12 in test_aborts_on_rank_1' in failure.text
    assert "rank 1 crashed at test_suite.py:12 (Fatal Python error: Aborted)" in proc.stdout
    cli = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "merge-junit", "out"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert cli.returncode == 1, cli.stderr
    assert (
        "FAILED test_suite.py::test_aborts_on_rank_1: rank 1 crashed; rank 0 failed; likely "
        "cause: rank 1 crashed at test_suite.py:12; rank 0 was in all_reduce #2 (float32[4]) "
        "issued at test_suite.py:13\n"
    ) in cli.stdout, cli.stdout
    merged = {t.name: t for t in merge_junit([tmp_path / "out"]).tests}["test_aborts_on_rank_1"]
    assert merged.results[1].message == (
        "crashed on rank 1 at test_suite.py:12 (Fatal Python error: Aborted): the rank ended "
        "while running this test"
    )


FAILS_THEN_PEER_DIES = """
import os
import time
import pytest

@pytest.mark.world(2, timeout=60)
def test_fails_then_peer_dies(rank):
    if rank == 1:
        time.sleep(1)  # rank 0 has failed and waits in the exchange of results
        os._exit(7)
    assert rank == 1, "rank 0 fails first"
"""


def test_a_peer_dying_after_this_rank_failed_is_in_the_junit_with_the_own_failure(tmp_path):
    _write(tmp_path, FAILS_THEN_PEER_DIES)
    proc = run_torchrun_pytest(
        tmp_path, "-q", "--color=no", "--junitxml=out/junit.xml", "test_suite.py"
    )
    assert proc.returncode != 0
    failure = _case(tmp_path / "out" / "junit.rank0.xml", "test_fails_then_peer_dies")
    failure = failure.find("failure")
    # The terminal and the JUnit give one verdict, the crash, and keep rank 0's own failure.
    assert failure.get("message").startswith("rank 1 crashed (ended without a result"), failure.get(
        "message"
    )
    assert "rank 0's own result before that: failed" in failure.text, failure.text
    assert "AssertionError: rank 0 fails first" in failure.text, failure.text
    assert "rankgate: rank 1 crashed (ended without a result" in proc.stdout, proc.stdout
    merged = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "merge-junit", "out", "-o", "merged.xml"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert "FAILED test_suite.py::test_fails_then_peer_dies: rank 1 crashed; rank 0 failed" in (
        merged.stdout
    ), merged.stdout


SIGNAL_AFTER_THE_SUMMARY = """
import os
import signal
import time

import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    result = yield  # the terminal's summary is out: its last line counted rank 0's test
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    return result
"""


def test_a_signal_after_a_ranks_summary_gives_a_second_summary_counting_the_run(tmp_path):
    # Rank 0 fails a plain test; rank 1 has written its summary (rank 0's failure counted
    # in) when the signal comes: the stop's own summary counts the run again, where it
    # stopped with "no summary: AttributeError(... 'head_line')" on the counted entries.
    _write(tmp_path, "def test_a():\n    assert False, 'planted'\n\ndef test_b():\n    pass\n")
    (tmp_path / "conftest.py").write_text(SIGNAL_AFTER_THE_SUMMARY)
    proc = run_torchrun_pytest(tmp_path, "-q", "-p", "no:randomly", "test_suite.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "no summary" not in out, out
    assert (
        "[rank 1] rankgate: rank 1 received SIGTERM (the launcher or the CI stopped the job) "
        "between tests; 0 later tests not run"
    ) in out, out
    log = (tmp_path / "pytest.rank1.log").read_text().splitlines()
    assert log[-2] == (
        "! rankgate: rank 1 received SIGTERM (the launcher or the CI stopped the job) "
        "between tests !"
    ), log
    assert log[-1].startswith("1 failed, 1 passed in "), log
    assert log.count("FAILED test_suite.py::test_a: rank 0 failed") == 2, log
