"""The pool benchmark's trivial test issues as many collectives as asked
(``measure_pool(..., collectives=N)``, which scripts/ledger/pool_body.py varies to tell a
cost per collective from a cost per test)."""

from __future__ import annotations

import statistics

import pytest

from rankgate.bench.pool_overhead import measure_pool

pytestmark = [pytest.mark.dist, pytest.mark.slow]  # a pytest run of its own, with ranks


def test_each_timed_test_issued_the_collectives_asked_for(monkeypatch):
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    # The inner test asserts its tensor is world ** N: with one all_reduce too few or too
    # many on either rank its run fails, and measure_pool raises SystemExit. N = 0 (an
    # empty body) ran on GPUs in the committed pool-body runs; one pool start is enough.
    result = measure_pool([2], "gloo", k=4, collectives=3)[2]
    assert len(result["steady_ms"]) == 4
    assert result["median_ms"] == pytest.approx(statistics.median(result["steady_ms"]))
