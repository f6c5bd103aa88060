"""Fault injection: each failure mode is reported exactly, and the next test passes.

Every inner file ends with ``test_next``, a collective on the same world, so a
pool left broken by the fault would show up as a second failure.
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.dist

NEXT = """
@pytest.mark.world(2, backend="gloo")
def test_next(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
"""

HEADER = """
import os, signal, time, ctypes
import pytest
import torch
import torch.distributed as dist
"""


def run_fault(inner, body: str, *args: str, ini: str = ""):
    start = time.monotonic()
    result = inner(HEADER + body + NEXT, *args, ini=ini)
    return result, time.monotonic() - start


def test_exception_on_one_rank(inner):
    result, _ = run_fault(
        inner,
        """
@pytest.mark.world(2, backend="gloo")
def test_fault(rank):
    print(f"stdout of rank {rank}")
    if rank == 1:
        raise RuntimeError("boom on one rank")
""",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "rank 1 failed; rank 0 passed (world 2, backend gloo)",
            "*rank 1: failed*",
            '*raise RuntimeError("boom on one rank")',
            "RuntimeError: boom on one rank",
            "reproduce: pytest -p no:cacheprovider 'test_inner.py::test_fault' --rankgate-seed=0  "
            "# world=2 backend=gloo seed=*",
            "*Captured stdout call (rank 0)*",
            "stdout of rank 0",
            "*Captured stdout call (rank 1)*",
            "stdout of rank 1",
        ]
    )
    assert "rank 0: failed" not in result.stdout.str()


def test_assertion_on_one_rank_shows_rewritten_values(inner):
    result, _ = run_fault(
        inner,
        """
@pytest.mark.world(2, backend="gloo")
def test_fault(rank):
    expected = [1, 2, 3]
    got = [1, 2, 3 + rank]
    assert got == expected
""",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "rank 1 failed; rank 0 passed (world 2, backend gloo)",
            "AssertionError: assert [1, 2, 4] == [1, 2, 3]",
        ]
    )


def test_failed_rank_does_not_leave_peer_waiting_until_timeout(inner):
    # Rank 1 fails before the collective; rank 0 waits in it. The test must end
    # shortly after rank 1's failure, with rank 0's stack, not at the 120 s timeout.
    result, seconds = run_fault(
        inner,
        """
@pytest.mark.world(2, backend="gloo", timeout=120)
def test_fault(rank):
    assert rank == 0, "rank 1 refuses"
    dist.barrier()
""",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "rank 1 failed; rank 0 hung; likely cause: rank 1 never issued barrier #1 that "
            "rank 0 issued at test_inner.py:*; rank 1 issued no collective "
            "(world 2, backend gloo)",
            "*rank 1: failed*",
            "AssertionError: rank 1 refuses*",
            "*rank 0: hung*",
            "still running 3 s after rank 1 failed; stopped",
            "Python stacks of every thread (faulthandler):",
            '*File "*test_inner.py", line * in test_fault',
        ]
    )
    assert seconds < 60


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("ctypes.string_at(0)", "rank 1 crashed (killed by SIGSEGV (exit code -11))*"),
        ("os._exit(7)", "rank 1 crashed (exited with code 7)*"),
        (
            "os.kill(os.getpid(), signal.SIGKILL)",
            "rank 1 crashed (killed by SIGKILL (exit code -9))*",
        ),
    ],
    ids=["segfault", "os_exit", "sigkill"],
)
def test_crash_fails_within_seconds_naming_the_signal(inner, action, expected):
    result, cases = inner.junit(
        source=HEADER
        + f"""
@pytest.mark.world(2, backend="gloo", timeout=120)
def test_fault(rank):
    print(f"before the crash on rank {{rank}}", flush=True)
    if rank == 1:
        {action}
    dist.barrier()
"""
        + NEXT,
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            expected,
            "*rank 1: crashed*",
            "*Captured stdout call (rank 0)*",
            "before the crash on rank 0",
            "*Captured stdout call (rank 1)*",
            "before the crash on rank 1",
        ]
    )
    # This test's own time (pool start included), not the session's: far below the timeout.
    seconds = float(cases["test_fault"].get("time"))
    assert seconds < 15, f"the crash took {seconds:.0f} s to report: it waited for the timeout"
    props = inner.properties(cases["test_fault"])
    assert props["rankgate.rank1.outcome"] == "crashed"
    assert props["rankgate.rank1.stdout"] == "before the crash on rank 1\n"


def test_segfault_report_carries_the_rank_fatal_error_stack(inner):
    result, _ = run_fault(
        inner,
        """
@pytest.mark.world(2, backend="gloo")
def test_fault(rank):
    if rank == 1:
        ctypes.string_at(0)
    dist.barrier()
""",
    )
    result.stdout.fnmatch_lines(
        [
            "*Captured stderr call (rank 1)*",
            "Fatal Python error: Segmentation fault",
            '*File "*test_inner.py", line * in test_fault',
        ]
    )


def _record_order(monkeypatch) -> list[str]:
    """'ledgers' when the controller has the ranks' ledgers, 'stacks' when it starts the
    stack dump, in the order they happen."""
    from rankgate.harness.pool import hungstacks, ledgerdump

    order: list[str] = []
    collect, dump = ledgerdump.collect, hungstacks.dump

    def collecting(*args, **kwargs):
        found = collect(*args, **kwargs)
        order.append("ledgers")
        return found

    def dumping(*args, **kwargs):
        order.append("stacks")
        return dump(*args, **kwargs)

    monkeypatch.setattr(ledgerdump, "collect", collecting)
    monkeypatch.setattr(hungstacks, "dump", dumping)
    return order


def test_hang_inside_a_collective_dumps_every_rank_stack(inner, monkeypatch):
    # The ledgers are in before the stack signal: faulthandler's handler walks every
    # thread's frames without the GIL, and a rank's ledger thread still encoding its answer
    # crashed the rank mid-dump (a CI run: rank 1's stack cut off by a segfault).
    order = _record_order(monkeypatch)
    result, seconds = run_fault(
        inner,
        """
@pytest.mark.world(2, backend="gloo", timeout=4)
def test_fault(rank):
    t = torch.zeros(1)
    if rank == 0:
        dist.all_reduce(t)      # rank 1 never joins this all_reduce
    else:
        dist.recv(t, src=0)     # and rank 0 never sends
""",
    )
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            # The ledgers name the cause: rank 1 went on to a point-to-point call.
            "ranks 0, 1 hung; likely cause: rank 1 never issued all_reduce #1 (float32[[]1]) "
            "that rank 0 issued at test_inner.py:*; rank 1's last: recv #1 at "
            "test_inner.py:* (world 2, backend gloo)",
            "*rank 0: hung*",
            "did not finish within the test's timeout of 4 s",
            "*in all_reduce",
            "*rank 1: hung*",
            "*in recv",
        ]
    )
    assert out.count("Python stacks of every thread (faulthandler):") == 2
    assert "Fatal Python error" not in out
    assert order == ["ledgers", "stacks"]
    assert seconds < 60


def test_hang_outside_a_collective(inner):
    result, _ = run_fault(
        inner,
        """
@pytest.mark.world(2, backend="gloo", timeout=3)
def test_fault(rank):
    time.sleep(1000)
""",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "ranks 0, 1 hung; likely cause: rank 0 in user code at test_inner.py:*; "
            "rank 1 in user code at test_inner.py:* (world 2, backend gloo)",
            "*rank 0: hung*",
            "did not finish within the test's timeout of 3 s",
            '*File "*test_inner.py", line * in test_fault',
            "  (rankgate worker frames omitted)",
            "*rank 1: hung*",
            "did not finish within the test's timeout of 3 s",
            '*File "*test_inner.py", line * in test_fault',
            "  (rankgate worker frames omitted)",
        ]
    )
    assert result.stdout.str().count("Python stacks of every thread (faulthandler):") == 2


def test_timeout_from_command_line_and_ini(inner):
    body = """
@pytest.mark.world(2, backend="gloo")
def test_fault(rank):
    time.sleep(1000)
"""
    result, _ = run_fault(inner, body, "--rankgate-timeout=2")
    result.stdout.fnmatch_lines(["did not finish within the test's timeout of 2 s"])
    result, _ = run_fault(inner, body, ini="rankgate_timeout = 3")
    result.stdout.fnmatch_lines(["did not finish within the test's timeout of 3 s"])


def test_timeout_precedence_marker_over_command_line_over_ini(inner):
    result, _ = run_fault(
        inner,
        """
@pytest.mark.world(2, backend="gloo", timeout=2)
def test_marker(rank):
    time.sleep(1000)

@pytest.mark.world(2, backend="gloo")
def test_command_line(rank):
    time.sleep(1000)
""",
        "--rankgate-timeout=3",
        ini="rankgate_timeout = 100",
    )
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*_ test_marker _*",
            "did not finish within the test's timeout of 2 s",
            "*_ test_command_line _*",
            "did not finish within the test's timeout of 3 s",
        ]
    )


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (("--rankgate-timeout=0",), "", "--rankgate-timeout must be > 0 seconds, got 0"),
        (("--rankgate-timeout=-1",), "", "--rankgate-timeout must be > 0 seconds, got -1"),
        (("--rankgate-timeout=nan",), "", "--rankgate-timeout must be > 0 seconds, got nan"),
        ((), "rankgate_timeout = 0", "ini option rankgate_timeout must be > 0, got 0"),
        ((), "rankgate_timeout = soon", "ini option rankgate_timeout = 'soon' is not a number"),
        # Read when the first pool starts: still a usage error at the start, not an
        # error of whichever test happens to start a pool.
        (
            (),
            "rankgate_start_timeout = soon",
            "ini option rankgate_start_timeout = 'soon' is not a number",
        ),
        (
            (),
            "rankgate_rendezvous_timeout = -5",
            "ini option rankgate_rendezvous_timeout must be > 0, got -5",
        ),
    ],
    ids=[
        "cli_zero",
        "cli_negative",
        "cli_nan",
        "ini_zero",
        "ini_not_a_number",
        "ini_start",
        "ini_rendezvous",
    ],
)
def test_bad_default_timeout_is_a_usage_error(inner, args, ini, message):
    result = inner(HEADER + NEXT, *args, ini=ini)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])


@pytest.mark.parametrize("name", ["rankgate_cold_workers", "rankgate_one_world_per_rank"])
def test_a_flag_that_is_not_true_or_false_is_a_usage_error_naming_it(inner, name):
    result = inner(HEADER + NEXT, ini=f"{name} = maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: ini option {name}: invalid truth value 'maybe'; "
            "give true or false (or yes/no, 1/0)"
        ]
    )


def test_skip_disagreement_is_an_error(inner):
    result, _ = run_fault(
        inner,
        """
@pytest.mark.world(2, backend="gloo")
def test_fault(rank):
    if rank == 0:
        pytest.skip("only rank 0 skips")
""",
    )
    result.stdout.fnmatch_lines(
        [
            "*ERROR at call of test_fault*",
            "ranks disagree (world 2, backend gloo): rank 0 skipped; rank 1 passed",
            "*rank 0: skipped*",
            "only rank 0 skips",
            "ERROR test_inner.py::test_fault - ranks disagree*",
            "*1 passed, 1 error*",
        ]
    )


def test_skip_on_every_rank_is_a_skip(inner):
    result, _ = run_fault(
        inner,
        """
@pytest.mark.world(2, backend="gloo")
def test_fault(rank):
    pytest.skip("not on this machine")
""",
    )
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1] test_inner.py:*: not on this machine"])


def test_rank_output_and_verdict_in_junit(inner):
    result, cases = inner.junit(
        source=HEADER
        + """
@pytest.mark.world(2, backend="gloo")
def test_fault(rank):
    print(f"out {rank}")
    os.write(2, f"err {rank}\\n".encode())
    assert rank == 0
"""
        + NEXT,
    )
    result.assert_outcomes(passed=1, failed=1)
    props = inner.properties(cases["test_fault"])
    assert props["rankgate.failing_ranks"] == "1"
    assert props["rankgate.verdict"] == "failed"
    assert props["rankgate.rank0.outcome"] == "passed"
    assert props["rankgate.rank1.outcome"] == "failed"
    assert props["rankgate.rank0.stdout"] == "out 0\n"
    assert props["rankgate.rank1.stderr"] == "err 1\n"
    failure = cases["test_fault"].find("failure")
    assert failure.get("message") == "rank 1 failed; rank 0 passed (world 2, backend gloo)"
    assert "assert rank == 0" in failure.text
    assert inner.properties(cases["test_next"])["rankgate.verdict"] == "passed"


def test_summary_line_is_the_headline_on_ci(inner, monkeypatch):
    # pytest prints a string report whole in the short summary when CI is set;
    # the multi-rank report must still appear once, in the FAILURES section.
    monkeypatch.setenv("CI", "true")
    result, _ = run_fault(
        inner,
        """
@pytest.mark.world(2, backend="gloo")
def test_fault(rank):
    assert rank == 0, "rank-one-only-message"
""",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["FAILED test_inner.py::test_fault - rank 1 failed; rank 0 passed (world 2, backend gloo)"]
    )
    assert result.stdout.str().count("AssertionError: rank-one-only-message") == 1


def test_hang_in_a_collective_outlives_the_rendezvous_timeout(inner):
    # The process group's operation timeout must not end a hang before the test's
    # timeout does: the harness's timeout is the one that reports stacks and respawns.
    result, _ = run_fault(
        inner,
        """
@pytest.mark.world(2, backend="gloo", timeout=6)
def test_fault(rank):
    t = torch.zeros(1)
    if rank == 0:
        dist.all_reduce(t)      # rank 1 never joins
    else:
        time.sleep(1000)
""",
        ini="rankgate_rendezvous_timeout = 2",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            # Root cause first: rank 1 never joined the all_reduce rank 0 waits in.
            "ranks 0, 1 hung; likely cause: rank 1 never issued all_reduce #1 (float32[[]1]) "
            "that rank 0 issued at test_inner.py:*; rank 1 issued no collective (now in user "
            "code at test_inner.py:*) (world 2, backend gloo)",
            "*rank 0: hung*",
            "did not finish within the test's timeout of 6 s",
            "*in all_reduce",
            "*rank 1: hung*",
            '*File "*test_inner.py", line * in test_fault',
        ]
    )
    assert result.stdout.str().count("Python stacks of every thread (faulthandler):") == 2


def test_process_group_error_gets_the_next_test_a_fresh_pool(inner):
    # A backend error (here a gloo timeout the test provoked by shortening the group's
    # timeout) leaves the group unusable: the next test must not inherit it.
    result, _ = run_fault(
        inner,
        """
from datetime import timedelta

def record(dist_tmp_path, name):
    (dist_tmp_path.parent / name).write_text(str(os.getpid()))

@pytest.mark.world(2, backend="gloo")
def test_fault(rank, dist_tmp_path):
    record(dist_tmp_path, f"fault{rank}")
    dist.distributed_c10d._set_pg_timeout(timedelta(seconds=1))
    if rank == 0:
        dist.all_reduce(torch.zeros(1))  # times out: rank 1 never joins
    else:
        time.sleep(2)

@pytest.mark.world(2, backend="gloo")
def test_after(rank, dist_tmp_path):
    record(dist_tmp_path, f"after{rank}")
""",
        "--basetemp=bt",
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            # rank 1's body returned, but it skipped the collective: never "passed"
            "rank 1 diverged; rank 0 failed; likely cause: rank 1 never issued all_reduce #1 "
            "(float32[[]1]) that rank 0 issued at test_inner.py:*; rank 1 issued no collective "
            "(world 2, backend gloo)",
            "RuntimeError: *gloo*Timed out waiting 1000ms*",
        ]
    )
    base = inner.pytester.path / "bt"
    fault = {(base / f"fault{r}").read_text() for r in (0, 1)}
    after = {(base / f"after{r}").read_text() for r in (0, 1)}
    assert fault.isdisjoint(after), "the test after a process-group error ran on the broken pool"
