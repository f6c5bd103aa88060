"""Pool mode against a hostile user: a verdict always lands on its own test.

Each case here once gave a wrong or misleading verdict (a result on the next test,
a pool poisoned for every later test, output cut silently, a process left running).
"""

from __future__ import annotations

import os
import time

import pytest

from rankgate.harness.leaks import running
from rankgate.harness.output import JUNIT_LIMIT

pytestmark = pytest.mark.dist

HEADER = """
import os, signal, subprocess, sys, time
import pytest
import torch
import torch.distributed as dist
"""

NEXT = """
@pytest.mark.world(2)
def test_next(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
"""


def test_pytest_timeout_interrupting_a_test_does_not_shift_later_verdicts(inner):
    # pytest-timeout once raised inside the controller's wait while the ranks still ran
    # test_a; test_b then got test_a's results, test_c test_b's, and so on. Its --timeout
    # is now rankgate's timeout on a world test (timeout_bridge), so rankgate ends test_a
    # with its own verdict, and the later verdicts stay on their tests. Gloo: on a
    # machine with GPUs an NCCL world's set-up waits for GPUs other workers' tests hold,
    # inside the 8 s, and pytest-timeout would stop that wait instead of test_a.
    result = inner(
        HEADER
        + """
@pytest.mark.world(2, backend="gloo")
def test_0_start_the_pool(rank):
    pass

@pytest.mark.world(2, backend="gloo")
def test_a_slow(rank):
    time.sleep(30)
    print(f"A finished on {rank}")

@pytest.mark.world(2, backend="gloo")
def test_b_fails(rank):
    assert rank != 0, "B fails on purpose on rank 0"

@pytest.mark.world(2, backend="gloo")
def test_c_ok(rank):
    print(f"C ran on {rank}")
""",
        "--timeout=8",
        "--junitxml=junit.xml",
    )
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "FAILED test_inner.py::test_a_slow - ranks 0, 1 hung*",
            "FAILED test_inner.py::test_b_fails - rank 0 failed; rank 1 passed*",
        ]
    )
    assert "B fails on purpose on rank 0" in out
    assert "A finished" not in out
    assert "from pytest-timeout" not in out
    result.stdout.fnmatch_lines(["*Captured stdout call (rank 0)*", "C ran on 0"])


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (
            'world(2, timeout=float("inf"))',
            "timeout must be a finite number of seconds up to 604800 (a week), got inf",
        ),
        (
            "world(2, timeout=3e6)",
            "timeout must be a finite number of seconds up to 604800 (a week), got 3e+06",
        ),
    ],
    ids=["inf", "huge"],
)
def test_endless_marker_timeout_is_a_collection_error(inner, marker, message):
    result = inner(HEADER + f"\n@pytest.mark.{marker}\ndef test_fault(rank):\n    pass\n" + NEXT)
    result.assert_outcomes(errors=1)  # a collection error stops the session
    result.stdout.fnmatch_lines(
        [f"*test_inner.py::test_fault: invalid @pytest.mark.world: {message}*"]
    )


@pytest.mark.parametrize("value", ["inf", "1e7", "3e6"])
def test_endless_command_line_timeout_is_a_usage_error(inner, value):
    result = inner(HEADER + NEXT, f"--rankgate-timeout={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    shown = f"{float(value):g}"
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --rankgate-timeout must be a finite number of seconds up to 604800 (a week), got {shown}*"
        ]
    )


def test_destroying_the_process_group_fails_that_test_only(inner):
    result = inner(
        HEADER
        + """
@pytest.mark.world(2, backend="gloo")
def test_fault(rank):
    dist.barrier()
    dist.destroy_process_group()
"""
        + NEXT
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            # "(rank N first)" when one rank's failure came clearly first
            "ranks 0, 1 failed*; likely cause: ranks 0, 1 destroyed the default process group "
            "at test_inner.py:9 (world 2, backend gloo)",
            "rankgate: the test destroyed the default process group (dist.destroy_process_group()); *remove the call*",
        ]
    )


DESTROYED_ON_ONE_RANK = """
@pytest.mark.world(2, backend="gloo")
def test_fault(rank):
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 1:
        dist.destroy_process_group()
        return
    dist.all_reduce(t)
"""


def test_a_group_destroyed_on_one_rank_is_the_headline(inner):
    # Before, the ledger named rank 1's group after the destroy ("ranks []"), and the
    # headline said rank 1 never issued the all_reduce #1 it had completed.
    result = inner(HEADER + DESTROYED_ON_ONE_RANK + NEXT, "--rankgate-timeout=10")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "ranks 0, 1 failed; likely cause: rank 1 destroyed the default process group at "
            "test_inner.py:11; rank 0 was in all_reduce #2 (float32[4]) issued at "
            "test_inner.py:13 (world 2, backend gloo)",
            "Collectives issued around the divergence:",
            "     rank 0                                            rank 1",
            " #1  all_reduce float32[4] test_inner.py:9 completed   "
            "all_reduce float32[4] test_inner.py:9 completed",
            ">#2  all_reduce float32[4] test_inner.py:13 failed     "
            "destroy_process_group test_inner.py:11 completed",
        ]
    )
    assert "never issued" not in result.stdout.str()


def test_long_output_keeps_its_head_and_tail_and_says_it_was_cut(inner):
    result, cases = inner.junit(
        source=HEADER
        + """
@pytest.mark.world(2)
def test_fault(rank):
    if rank == 1:
        for i in range(200_000):
            print(f"line {i}")
    assert rank == 0
"""
        + NEXT
    )
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    section = out.split("Captured stdout call (rank 1)")[1]
    assert "\nline 0\n" in section and "\nline 199999\n" in section
    assert (
        "[rankgate: " in section
        and " bytes of this output cut here; its start and end are kept]" in section
    )
    junit_text = inner.properties(cases["test_fault"])["rankgate.rank1.stdout"]
    assert junit_text.startswith("line 0\n")
    assert junit_text.endswith("line 199999\n")
    assert " bytes of this output cut here; its start and end are kept]\n" in junit_text
    assert len(junit_text.encode()) <= JUNIT_LIMIT + 100
    # Cut on whole lines: no line is broken where the marker sits.
    before, after = junit_text.split("[rankgate: ")
    assert before.endswith("\n") and after.split("\n", 1)[1].startswith("line ")


@pytest.mark.parametrize(
    ("fixture", "instead"),
    [
        ("capsys", "print() in the test body"),
        ("caplog", "logging in the test body"),
        ("request", "a fixture of your own that reads what the test needs from request"),
    ],
)
def test_per_process_fixture_in_a_world_test_is_a_clear_collection_error(inner, fixture, instead):
    result = inner(
        HEADER + f"\n@pytest.mark.world(2)\ndef test_fault(rank, {fixture}):\n    pass\n" + NEXT
    )
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert (
        f"fixture {fixture!r} belongs to one process, and a world test's body runs on every rank"
        in out
    )
    assert f"Use instead: {instead}" in out
    assert "picklable" not in out


def test_stacked_world_markers_are_a_collection_error(inner):
    result = inner(
        HEADER
        + """
@pytest.mark.world(2)
@pytest.mark.world(3)
def test_fault(rank):
    pass
"""
        + NEXT
    )
    result.assert_outcomes(errors=1)
    assert "During handling" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*invalid @pytest.mark.world: the test has 2 different world markers (world(3), world(2)); keep one*"
        ]
    )


def test_child_in_its_own_session_is_named_and_ended(inner):
    result = inner(
        HEADER
        + """
@pytest.mark.world(2, backend="gloo")
def test_fault(rank, dist_tmp_path):
    if rank == 1:
        child = subprocess.Popen(["sleep", "1000"], start_new_session=True)
        (dist_tmp_path.parent / "child").write_text(str(child.pid))
"""
        + NEXT,
        "--basetemp=bt",
    )
    result.assert_outcomes(passed=1, failed=1)
    pid = int((inner.pytester.path / "bt" / "child").read_text())
    result.stdout.fnmatch_lines(
        [
            f"rank 1 failed; rank 0 passed; rank 1 left processes running: pid {pid} "
            "(sleep 1000), in its own session (world 2, backend gloo)",
            f"rankgate: the test left processes running; they were ended: pid {pid} (sleep 1000), in its own session. End what a test starts*",
        ]
    )
    deadline = time.monotonic() + 5
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(pid)


def test_hung_rank_stack_is_printed_once(inner):
    result = inner(
        HEADER
        + """
@pytest.mark.world(2, timeout=3)
def test_fault(rank):
    time.sleep(1000)
"""
        + NEXT
    )
    result.assert_outcomes(passed=1, failed=1)
    frames = [
        line
        for line in result.stdout.lines
        if line.endswith(" in test_fault") and 'test_inner.py", line' in line
    ]
    assert len(frames) == 2, frames  # one per rank: in the verdict, not again in captured stderr


INHERITED = """
class Base:
    name = "base"

    @pytest.mark.world(2)
    def test_names_its_class(self, rank):
        print(f"ran as {self.name} on {rank}")
        assert self.name != "base", "the base class ran"


class TestChild(Base):
    name = "child"


class TestOther(Base):
    name = "other"
"""


def test_an_inherited_world_test_runs_on_the_class_it_was_collected_on(inner):
    # The ranks found the body by the function's __qualname__ ("Base.test_..."), so
    # every subclass ran the base class's attributes and failed with them.
    result = inner(HEADER + INHERITED, "-s")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "ran as child on 1" in out
    assert "ran as other on 1" in out


FAKE_GPU = """
import rankgate.harness.pool.session as session

session.visible_gpu_count = lambda: 1  # one GPU, named by CUDA_VISIBLE_DEVICES below
"""


def test_a_gpu_held_past_its_holders_time_ends_in_an_error_naming_the_holder(
    inner, tmp_path, monkeypatch
):
    # A run stopped with a worker left behind holds its GPUs' leases: a later run's world
    # test waited for them without end, and without a word.
    from rankgate.harness.pool.gpulease import LEASE_DIR_ENV, GpuLease

    leases = tmp_path / "leases"
    monkeypatch.setenv(LEASE_DIR_ENV, str(leases))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-held-elsewhere")
    inner.pytester.makeconftest(FAKE_GPU)
    held = GpuLease(["GPU-held-elsewhere"], leases)
    held.acquire(holds_for_s=0, what="a test of a stopped run")
    try:
        result = inner(
            HEADER
            + """
@pytest.mark.world(1, backend="nccl")
def test_needs_the_gpu(rank):
    pass
""",
            subprocess=True,
        )
    finally:
        held.release()
    result.assert_outcomes(errors=1)
    assert "During handling" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_needs_the_gpu*",
            f"rankgate: GPU GPU-held-elsewhere is held by pid {os.getpid()} (*), which took it "
            "for a test of a stopped run and is * s past the 0 s it was given: it is stuck, or "
            "a stopped run left it behind; end it to free the GPU "
            f"(lease {leases}/gpu-GPU-held-elsewhere)",
        ]
    )
    assert result.duration < 60
