"""In place, a rank whose test begins later than its peers' (a slower set-up) still
answers the hang of the rank that timed out first: its ledger names the cause."""

from __future__ import annotations

import textwrap

import pytest
from jobs import run_torchrun_pytest

from rankgate.harness import ledger
from rankgate.report.junit import merge_junit

# slow: starts torchrun, and pytest on every rank
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

LATE_CULPRIT = """
import time
import pytest
import torch
import torch.distributed as dist

@pytest.fixture
def late_on_rank_1(rank):
    if rank == 1:
        time.sleep(4)  # in set-up: rank 1's timeout starts 4 s after rank 0's

@pytest.mark.world(2, backend="gloo", timeout=5)
def test_rank_1_never_all_reduces(rank, late_on_rank_1):
    if rank == 1:
        dist.barrier()
    else:
        dist.all_reduce(torch.ones(4))
    dist.barrier()
"""

CAUSE = (  # two ranks, two calls: the ledgers name both, neither as the odd one out
    "the ledgers cannot tell which rank is wrong: ranks disagree at #1: rank 0 issued "
    "all_reduce float32[4] at test_suite.py:17, rank 1 issued barrier at test_suite.py:15; "
    "rank 0 waits in all_reduce #1 (float32[4]) issued at test_suite.py:17; rank 1 waits in "
    "barrier #1 issued at test_suite.py:15"
)


def test_the_first_rank_to_time_out_hears_the_late_rank_and_names_the_cause(tmp_path, monkeypatch):
    monkeypatch.setenv(ledger.ENV, "1")  # the cause is the ledger's, GPUs seen or not
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(LATE_CULPRIT))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = run_torchrun_pytest(tmp_path, "-q", "test_suite.py", "--junitxml=out/junit.xml")
    assert proc.returncode != 0
    merged = merge_junit([tmp_path / "out"])
    (case,) = merged.tests
    assert case.message == f"ranks 0, 1 hung; {CAUSE}"
    # rank 0's terminal says it too (before the fix it waited 2 s for a rank that
    # timed out 4 s after it, and named no cause)
    assert (
        "ranks 0, 1 hung (did not finish within the test's timeout of 5 s; the ranks "
        f"exited); {CAUSE}"
    ) in proc.stdout, proc.stdout + proc.stderr
