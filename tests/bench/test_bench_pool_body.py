"""The pool benchmark's trivial test issues as many collectives as asked
(``measure_pool(..., collectives=N)``, which scripts/ledger/pool_body.py varies to tell a
cost per collective from a cost per test)."""

from __future__ import annotations

import statistics

import pytest

from rankgate.bench.pool_overhead import measure_pool

pytestmark = [pytest.mark.dist, pytest.mark.slow]  # a pytest run of its own, with ranks


@pytest.mark.parametrize("collectives", [0, 3])
def test_each_timed_test_issued_the_collectives_asked_for(monkeypatch, collectives):
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    # The inner test asserts its tensor is world ** N: with one all_reduce too few or too
    # many on either rank its run fails, and measure_pool raises SystemExit.
    result = measure_pool([2], "gloo", k=4, collectives=collectives)[2]
    assert len(result["steady_ms"]) == 4
    assert result["median_ms"] == pytest.approx(statistics.median(result["steady_ms"]))
