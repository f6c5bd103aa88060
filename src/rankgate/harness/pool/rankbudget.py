"""The rank budget of a pytest-xdist run: how many rank processes the workers' pools
hold at once, machine-wide.

Every xdist worker owns its pools; left alone, each starts one per world size its
tests need and keeps it, so ``-n 16`` on a node whose tests use worlds 1 to 8 holds
16 x 36 ranks. Under ``-n`` the workers share one budget instead: at most
``limit`` ranks (:data:`RANKS_PER_CPU` per CPU the run may use, ``--rankgate-max-ranks``
to change) are alive in all pools together, and a world larger than the budget runs alone.

The budget is one small JSON ledger in the run's shared temp directory, read and
written under an exclusive ``flock`` of a file beside it: ``held`` (ranks per
worker) and ``queue`` (workers waiting for ranks, first come first served). A
worker's entries name its pid; a dead worker's are dropped by whoever reads the
ledger next, so a crashed worker never keeps ranks. A waiting worker is at the
queue's head before it may take ranks, so a large world is never starved by small
ones; workers give back idle pools while anyone waits (:class:`.registry.PoolRegistry`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

BUDGET_DIR_KEY = "rankgate_rank_budget"
"""The key of ``workerinput`` that hands each worker the budget's directory and limit."""

POLL_S = 0.02
"""A waiting worker reads the ledger this often."""

RANKS_PER_CPU = 8
"""The default budget's ranks per CPU. An idle rank waits on its pipe and costs no CPU; a
budget that counts it as busy makes workers end and restart pools as their tests
alternate world sizes. On 2 cores, 302 world(2)/world(4) tests under ``-n 2``: a budget
of 2, 4 or 8 ranks restarted pools for 107-117 rank starts (60-71 CPU-s, 131-208 s); 16
started each worker's pools once (13-14 rank starts, 40-44 CPU-s, 70-92 s)
(benchmarks/results/cpu/rank-budget-2026-11-29.txt)."""


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def default_max_ranks(cpus: int | None = None) -> int:
    """The budget without ``--rankgate-max-ranks``: :data:`RANKS_PER_CPU` per CPU."""
    return RANKS_PER_CPU * (usable_cpus() if cpus is None else cpus)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user's too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(slots=True)
class _Ledger:
    held: dict[str, int]
    queue: list[str]
    peak: int

    def live(self) -> int:
        return sum(self.held.values())


class RankBudget:
    """One worker's view of the run's budget: ``take`` before a pool starts, ``give``
    when it ends; ``someone_waits`` tells the worker to give back its idle pools."""

    def __init__(self, directory: Path, limit: int) -> None:
        self.directory = Path(directory)
        self.limit = limit
        self._me = str(os.getpid())
        self._lock = self.directory / "ranks.lock"
        self._file = self.directory / "ranks.json"
        self.waited_s = 0.0
        """Seconds this worker spent waiting for ranks, all pools together."""

    @contextlib.contextmanager
    def _ledger(self):
        with open(self._lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                ledger = self._read()
                yield ledger
                tmp = self._file.with_name(f"ranks.{self._me}.tmp")
                tmp.write_text(json.dumps({"held": ledger.held, "queue": ledger.queue,
                                           "peak": ledger.peak}))  # fmt: skip
                os.replace(tmp, self._file)  # readers without the lock see whole files
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> _Ledger:
        try:
            raw = json.loads(self._file.read_text())
        except (FileNotFoundError, ValueError):
            raw = {}
        held = {p: n for p, n in raw.get("held", {}).items() if pid_alive(int(p))}
        queue = [p for p in raw.get("queue", []) if pid_alive(int(p))]
        return _Ledger(held, queue, raw.get("peak", 0))

    def _try_take(self, ranks: int) -> bool:
        """Take the ranks if this worker is first in the queue and they fit (a world
        larger than the whole budget fits when no other rank is alive); else queue up."""
        with self._ledger() as ledger:
            if self._me not in ledger.queue:
                ledger.queue.append(self._me)
            live = ledger.live()
            if ledger.queue[0] != self._me or (live + ranks > self.limit and live > 0):
                return False
            ledger.queue.remove(self._me)
            ledger.held[self._me] = ledger.held.get(self._me, 0) + ranks
            ledger.peak = max(ledger.peak, ledger.live())
            return True

    def take(self, ranks: int, give_back_idle) -> None:
        """Hold ``ranks`` more rank processes, waiting for them as long as it takes.

        ``give_back_idle()`` ends this worker's own idle pools (calling ``give`` for
        each): asked while we wait, so two waiting workers never hold each other's ranks.
        """
        start = time.monotonic()
        try:
            while not self._try_take(ranks):
                give_back_idle()
                time.sleep(POLL_S)
        except BaseException:  # interrupted while queued: leave the queue to the others
            with self._ledger() as ledger:
                if self._me in ledger.queue:
                    ledger.queue.remove(self._me)
            raise
        finally:
            self.waited_s += time.monotonic() - start

    def give(self, ranks: int) -> None:
        with self._ledger() as ledger:
            left = ledger.held.get(self._me, 0) - ranks
            if left > 0:
                ledger.held[self._me] = left
            else:
                ledger.held.pop(self._me, None)

    def someone_waits(self) -> bool:
        """Whether another worker is queued for ranks (read without the lock)."""
        try:
            queue = json.loads(self._file.read_text()).get("queue", [])
        except (FileNotFoundError, ValueError):
            return False
        return any(p != self._me for p in queue)

    def peak(self) -> int:
        """The most ranks the workers held at once so far."""
        try:
            return int(json.loads(self._file.read_text()).get("peak", 0))
        except (FileNotFoundError, ValueError):
            return 0
