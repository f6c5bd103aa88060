"""Hypothesis's @given on world tests (issue 59).

Before: the function-scoped-fixture health check failed every world test that took
``rank``; past it (suppressed by hand), a rank that failed an example shrank while the
others drew new examples, and the next collective mismatched (gloo aborted rank 1:
"Received data size doesn't match expected size").
"""

from __future__ import annotations

import textwrap

import pytest
from jobs import run_torchrun_pytest

pytest.importorskip("hypothesis")

pytestmark = [pytest.mark.dist, pytest.mark.launches]

SOURCE = """
import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings, strategies as st

@pytest.mark.world(2, backend="gloo", timeout=60)
@settings(max_examples=25, deadline=None, database=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 40))
def test_sum_over_a_drawn_shape(rows, cols, rank, world_size, device):
    t = torch.full((rows, cols), float(rank + 1), device=device)
    dist.all_reduce(t)
    assert t.shape == (rows, cols)
    assert torch.all(t == world_size * (world_size + 1) / 2)

@pytest.mark.world(2, backend="gloo", timeout=60)
@settings(max_examples=40, deadline=None, database=None)
@given(n=st.integers(1, 300))
def test_planted_rank_dependent_bug(n, rank):
    t = torch.ones(n)
    dist.all_reduce(t)
    # the planted bug: rank 1 mishandles sizes from 100 on
    assert rank != 1 or n < 100, f"rank 1 breaks at n={n}"
"""


def _check(out: str) -> None:
    assert "FailedHealthCheck" not in out
    assert "doesn't match expected size" not in out
    assert "n=100" in out  # shrunk to the smallest failing example
    # the example is reported once, by the rank that failed it
    assert out.count("AssertionError: rank 1 breaks at n=100") == 1, out
    assert "AnotherRankFailedExample" not in out
    # the failure is explained by the test's frames, never by rankgate's bridge
    assert "hypothesis_bridge" not in out, out
    assert "test_planted_rank_dependent_bug" in out


def test_given_on_world_tests_in_the_pool(inner, hypothesis_plugin_in_inner_runs):
    result = inner(SOURCE)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ test_planted_rank_dependent_bug _*",
            "rank 1 failed; rank 0 passed (world 2, backend gloo)",
        ]
    )
    _check(result.stdout.str())


def test_own_function_scoped_fixture_still_trips_the_health_check(
    inner, hypothesis_plugin_in_inner_runs
):
    result = inner(
        """
import pytest
from hypothesis import given, strategies as st

@pytest.fixture
def counter():
    return []

@pytest.mark.world(2, backend="gloo")
@given(n=st.integers())
def test_keeps_state(n, rank, counter):
    counter.append(n)
"""
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FailedHealthCheck*uses a function-scoped fixture*"])


@pytest.mark.torch_dist
@pytest.mark.slow
def test_given_on_world_tests_in_place(tmp_path, hypothesis_plugin_in_inner_runs):
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SOURCE))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = run_torchrun_pytest(tmp_path, "-q", "-rA", "test_suite.py", timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "1 failed, 1 passed" in out, out
    assert "rank 1 failed; rank 0 passed" in out, out
    _check(out)
