"""The pools of one pytest process, keyed by (world, backend, GPUs)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from pathlib import Path

from rankgate.harness.pool.forkclient import RunForkServer
from rankgate.harness.pool.pool import (
    SHUTDOWN_WAIT_S,
    Pool,
    PoolKey,
    PoolSettings,
    PoolStartError,
)
from rankgate.harness.pool.rankbudget import RankBudget

MAX_LIVE_RANKS = 16
"""Idle pools beyond this many ranks are shut down, least recently used first."""

GIVE_BACK_POLL_S = 0.05
"""Under a rank budget, how often an idle worker looks whether another one waits."""

KEEP_IDLE_S = 0.5
"""The pool the next test needs is kept while another worker waits only this long: xdist
holds a worker's last test back until it sends more or ends the run, and a pool kept
for it meanwhile would hold the waiting worker, and the run, for good."""


class PoolRegistry:
    """Hands out pools; under pytest-xdist it holds their ranks from the run's
    :class:`.rankbudget.RankBudget` and gives idle pools back while another worker waits.

    The pool a test uses (``acquire`` until ``release``) and the one the next test will
    use (``release(keep=...)``) are never given back; a thread does the giving while the
    worker itself waits for xdist's next tests.
    """

    def __init__(
        self,
        base_dir: Path,
        settings: PoolSettings,
        fork_server: RunForkServer,
        budget: RankBudget | None = None,
    ) -> None:
        self._base_dir = base_dir
        self._settings = settings
        self._fork_server = fork_server
        self._pools: OrderedDict[PoolKey, Pool] = OrderedDict()
        self._started = 0
        # A pool that could not start will not start for the next test either (a
        # broken NCCL or a missing interconnect); retrying would cost every later
        # test up to the start timeout.
        self._start_failures: dict[PoolKey, PoolStartError] = {}
        self._budget = budget
        self._lock = threading.RLock()
        self._in_use: PoolKey | None = None
        self._keep: PoolKey | None = None
        self._idle_since = time.monotonic()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        if budget is not None:
            self._watcher = threading.Thread(
                target=self._give_back_while_others_wait, name="rankgate-give-back", daemon=True
            )
            self._watcher.start()

    @property
    def started(self) -> int:
        """How many pools this registry started."""
        return self._started

    def acquire(self, key: PoolKey) -> Pool:
        """A live pool for ``key``: the one kept from earlier tests, or a new one; in use
        until ``release``.

        Raises PoolStartError, and raises it again at once for every later ``key``.
        """
        with self._lock:
            self._in_use = key
            failure = self._start_failures.get(key)
            if failure is not None:
                raise PoolStartError(
                    f"{failure}\n(not retried: this pool already failed to start earlier in "
                    "this session)"
                )
            pool = self._pools.get(key)
            if pool is not None and pool.healthy():
                self._pools.move_to_end(key)
                return pool
            if pool is not None:
                self._drop(key, kill=True)  # a rank died between tests: replace the whole world
            self._evict(room_for=key.world)
            return self._start(key)

    def _start(self, key: PoolKey) -> Pool:
        if self._budget is not None:
            self._budget.take(key.world, self._give_back_idle)
        self._started += 1
        name = f"w{key.world}-{key.backend}-{self._started}"
        pool = Pool(key, self._base_dir / name, self._settings, self._fork_server)
        try:
            pool.start()
        except BaseException as exc:
            if self._budget is not None:
                self._budget.give(key.world)
            if isinstance(exc, PoolStartError):
                self._start_failures[key] = exc
            raise
        self._pools[key] = pool
        return pool

    def release(self, keep: PoolKey | None = None) -> None:
        """The test is done with its pool; ``keep`` is the pool the next test needs."""
        with self._lock:
            self._in_use, self._keep = None, keep
            self._idle_since = time.monotonic()

    def _drop(self, key: PoolKey, kill: bool = False) -> None:
        pool = self._pools.pop(key)
        if kill:
            pool.kill()
        else:
            pool.shutdown()
        if self._budget is not None:
            self._budget.give(key.world)

    def _evict(self, room_for: int) -> None:
        live = sum(p.key.world for p in self._pools.values())
        while self._pools and live + room_for > MAX_LIVE_RANKS:
            oldest = next(iter(self._pools))
            live -= oldest.world
            self._drop(oldest)

    def _give_back_idle(self, keep: PoolKey | None = None) -> None:
        """End every pool no test is using, but ``keep``'s (and ranks that died)."""
        for key in list(self._pools):
            if key not in (self._in_use, keep):
                self._drop(key, kill=not self._pools[key].alive)

    def _give_back_while_others_wait(self) -> None:
        while not self._stop.wait(GIVE_BACK_POLL_S):
            if not self._budget.someone_waits():
                continue
            if self._lock.acquire(blocking=False):  # a test starting a pool: next round
                try:
                    idle_s = time.monotonic() - self._idle_since
                    self._give_back_idle(keep=self._keep if idle_s < KEEP_IDLE_S else None)
                finally:
                    self._lock.release()

    def shutdown_all(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
        with self._lock:
            # Every pool is asked first, then waited for: the ranks of all of them tear
            # their groups down at once (four pools, one by one, took 137 ms at the end
            # of a session on 2 cores).
            leaving = [self._pools.pop(key) for key in reversed(list(self._pools))]
            for pool in leaving:
                pool.ask_to_leave()
            deadline = time.monotonic() + SHUTDOWN_WAIT_S
            for pool in leaving:
                pool.finish_leaving(deadline)
                if self._budget is not None:
                    self._budget.give(pool.key.world)
