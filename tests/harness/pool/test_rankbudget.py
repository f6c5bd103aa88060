"""The rank budget xdist workers share, across real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rankgate.harness.options import INI_OPTIONS
from rankgate.harness.pool.rankbudget import RankBudget, default_max_ranks

pytestmark = pytest.mark.unit

HOLDER = """
import os, sys
from pathlib import Path
from rankgate.harness.options import INI_OPTIONS
from rankgate.harness.pool.rankbudget import RankBudget, default_max_ranks
budget = RankBudget(Path(sys.argv[1]), int(sys.argv[2]))
budget.take(int(sys.argv[3]), lambda: None)
print("held", flush=True)
if sys.argv[4] == "die":
    os._exit(0)  # never gives: the ranks go with the process
sys.stdin.readline()
budget.give(int(sys.argv[3]))
print("given", flush=True)
"""


def _holder(directory: Path, limit: int, ranks: int, then: str = "wait") -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory), str(limit), str(ranks), then],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout.readline() == "held\n"
    return proc


def _take_in_thread(budget: RankBudget, ranks: int) -> threading.Thread:
    thread = threading.Thread(target=budget.take, args=(ranks, lambda: None), daemon=True)
    thread.start()
    return thread


def _ledger(directory: Path) -> dict:
    return json.loads((directory / "ranks.json").read_text())


def test_the_default_budget_is_eight_ranks_per_cpu():
    assert (default_max_ranks(1), default_max_ranks(2), default_max_ranks(16)) == (8, 16, 128)
    assert default_max_ranks() == 8 * len(os.sched_getaffinity(0))
    # the options' help says it too (the shared options module imports nothing of the pool)
    assert "(default: 8 per CPU this run may use)" in INI_OPTIONS["rankgate_max_ranks"][0]


def test_ranks_that_fit_are_taken_and_given_back(tmp_path):
    budget = RankBudget(tmp_path, 4)
    budget.take(2, lambda: None)
    budget.take(2, lambda: None)
    assert _ledger(tmp_path)["held"] == {str(os.getpid()): 4}
    budget.give(4)
    assert _ledger(tmp_path)["held"] == {}
    assert budget.peak() == 4


def test_a_worker_waits_until_another_gives_its_ranks_back(tmp_path):
    other = _holder(tmp_path, 2, 2)
    budget = RankBudget(tmp_path, 2)
    waiter = _take_in_thread(budget, 1)
    waiter.join(0.5)
    assert waiter.is_alive()  # 2 held of 2: no room for one more
    assert _ledger(tmp_path)["queue"] == [str(os.getpid())]  # what the holder's watch reads
    other.stdin.write("\n")
    other.stdin.flush()
    assert other.stdout.readline() == "given\n"
    waiter.join(10)
    assert not waiter.is_alive()
    assert budget.peak() == 2  # never 3 at once
    other.wait(10)


def test_a_world_larger_than_the_budget_runs_alone(tmp_path):
    budget = RankBudget(tmp_path, 2)
    budget.take(4, lambda: None)  # nothing else alive: it may start
    other = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path), "2", "1", "wait"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            other.wait(1.0)  # still waiting for the world of 4 to end
        budget.give(4)
        assert other.stdout.readline() == "held\n"
        assert budget.peak() == 4
    finally:
        other.kill()
        other.wait(10)


def test_a_dead_workers_ranks_are_free_again(tmp_path):
    _holder(tmp_path, 2, 2, then="die").wait(10)
    budget = RankBudget(tmp_path, 2)
    waiter = _take_in_thread(budget, 2)
    waiter.join(10)
    assert not waiter.is_alive()


def test_a_waiting_worker_gives_back_its_own_idle_pools_first(tmp_path):
    budget = RankBudget(tmp_path, 2)
    budget.take(2, lambda: None)  # its own idle pool
    given = []

    def give_back_idle():
        if not given:
            given.append(2)
            budget.give(2)

    budget.take(2, give_back_idle)  # returns: its own pool made the room
    assert given == [2]
    assert budget.peak() == 2


def test_an_interrupted_waiter_leaves_the_queue(tmp_path):
    other = _holder(tmp_path, 1, 1)
    budget = RankBudget(tmp_path, 1)

    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        budget.take(1, interrupt)
    assert _ledger(tmp_path)["queue"] == []
    other.stdin.write("\n")
    other.stdin.flush()
    other.wait(10)
