"""``rankgate bench harness`` times the pool's tests in file order, whatever plugins shuffle.

The first test of each world starts its pool and is reported apart (``first_test_s``);
pytest-randomly (in the dev extra) once shuffled the inner session, so a pool's start
landed among the steady tests and their mean read 8x too slow in the bench stage.
"""

from __future__ import annotations

import pytest

from rankgate.bench.pool_overhead import PHASES, measure_pool

pytestmark = [pytest.mark.dist, pytest.mark.slow]  # a pytest run of its own, with ranks


def test_the_pool_start_is_the_first_test_and_not_among_the_steady_ones(monkeypatch):
    # The project's conftest blocks pytest-randomly through PYTEST_ADDOPTS; a user's
    # `rankgate bench harness` has no such variable.
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    result = measure_pool([2], "gloo", k=10)[2]
    # A pool start (processes, a process group; torch too unless its fork server forks
    # from a warm one: 0.19 s under CI's load then) costs tens of steady tests. Shuffled,
    # the start would be test 0 one time in eleven; otherwise a steady test is first and
    # the start lifts the steady tests' mean.
    assert 1000 * result["first_test_s"] > 10 * result["median_ms"], result
    assert result["per_test_ms"] < 1000 * result["first_test_s"] / 3, result


def test_each_steady_test_is_split_into_its_phases(monkeypatch):
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    result = measure_pool([2], "gloo", k=5)[2]
    phases = result["phases_median_ms"]
    assert sorted(phases) == sorted(PHASES)
    # The call phase holds the ranks' round trip: never nothing. The medians of the parts
    # need not add up to the median of the whole, but none can exceed the slowest test.
    assert phases["call"] > 0, phases
    assert all(0 <= phases[p] <= max(result["steady_ms"]) for p in PHASES[:-1]), phases
    # A plain test in the same session (pytest's own cost) needs no round trip to ranks.
    assert result["plain_median_ms"] > 0, result  # measured, never ranked: wall time under load
    # The controller's own CPU time by phase: never more than the wall time it ran in.
    cpu = result["phases_cpu_median_ms"]
    assert sorted(cpu) == sorted(PHASES)
    assert cpu["setup"] > 0, cpu
    assert 0 < cpu["call"] < max(result["steady_ms"]), cpu
    assert 0 < result["plain_cpu_median_ms"] <= 1.5 * result["plain_median_ms"], result
