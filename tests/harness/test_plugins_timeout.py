"""pytest-timeout beside rankgate (issue 59): on a world test its timeout is rankgate's.

Before, pytest-timeout raised inside the pool controller's wait: "Failed: Timeout
(>3.0s) from pytest-timeout" with the controller's selector as the stack, and which
rank hung, its stack and the ledger were lost.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.launches]

HEADER = """
import time
import pytest
import torch
import torch.distributed as dist
"""

RANK_1_SLEEPS = """
@pytest.mark.world(2, backend="gloo")
@pytest.mark.timeout(3)
def test_hangs(rank):
    if rank == 1:
        time.sleep(1000)
    dist.barrier()

@pytest.mark.world(2, backend="gloo")
def test_next(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
"""


def test_timeout_marker_on_a_world_test_is_rankgates_timeout(inner):
    result = inner(HEADER + RANK_1_SLEEPS)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "from pytest-timeout" not in out
    result.stdout.fnmatch_lines(
        [
            "ranks 0, 1 hung; likely cause: rank 1 never issued barrier #1*",
            "*rank 0: hung*",
            "did not finish within the test's timeout of 3 s",
            "*rank 1: hung*",
            "did not finish within the test's timeout of 3 s",
            '*File "*test_inner.py", line * in test_hangs',
        ]
    )


def test_timeout_option_on_world_tests_is_rankgates_and_plain_tests_keep_pytest_timeout(inner):
    result = inner(
        HEADER
        + """
@pytest.mark.world(2, backend="gloo")
def test_world_hangs(rank):
    time.sleep(1000)

def test_plain_hangs():
    time.sleep(1000)

@pytest.mark.world(2, backend="gloo")
def test_next(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
""",
        "--timeout=3",
    )
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "FAILED test_inner.py::test_world_hangs - ranks 0, 1 hung*",
            "FAILED test_inner.py::test_plain_hangs - Failed: Timeout (>3.0s) from pytest*",
        ],
    )
    result.stdout.fnmatch_lines(["E       Failed: Timeout (>3.0s) from pytest-timeout."])
    result.stdout.fnmatch_lines(["did not finish within the test's timeout of 3 s"])


def test_world_markers_timeout_wins_over_pytest_timeouts(inner):
    result = inner(
        HEADER
        + """
@pytest.mark.world(2, backend="gloo", timeout=2)
@pytest.mark.timeout(600)
def test_hangs(rank):
    time.sleep(1000)
""",
        "--timeout=600",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["did not finish within the test's timeout of 2 s"])


def test_endless_timeout_marker_on_a_world_test_is_refused(inner):
    result = inner(
        HEADER
        + """
@pytest.mark.world(2, backend="gloo")
@pytest.mark.timeout(3e6)
def test_long(rank):
    pass
""",
    )
    result.stdout.fnmatch_lines(["*@pytest.mark.timeout must be a finite number of seconds*"])
