"""The pools of one pytest process, keyed by (world, backend, GPUs)."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from rankgate.harness.pool.pool import Pool, PoolKey, PoolSettings, PoolStartError

MAX_LIVE_RANKS = 16
"""Idle pools beyond this many ranks are shut down, least recently used first."""


class PoolRegistry:
    def __init__(self, base_dir: Path, settings: PoolSettings) -> None:
        self._base_dir = base_dir
        self._settings = settings
        self._pools: OrderedDict[PoolKey, Pool] = OrderedDict()
        self._started = 0
        # A pool that could not start will not start for the next test either (a
        # broken NCCL or a missing interconnect); retrying would cost every later
        # test up to the start timeout.
        self._start_failures: dict[PoolKey, PoolStartError] = {}

    def acquire(self, key: PoolKey) -> Pool:
        """A live pool for ``key``: the one kept from earlier tests, or a new one.

        Raises PoolStartError, and raises it again at once for every later ``key``.
        """
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
            pool.kill()  # a rank died between tests: replace the whole world
        self._pools.pop(key, None)
        self._evict(room_for=key.world)
        self._started += 1
        name = f"w{key.world}-{key.backend}-{self._started}"
        pool = Pool(key, self._base_dir / name, self._settings)
        try:
            pool.start()
        except PoolStartError as exc:
            self._start_failures[key] = exc
            raise
        self._pools[key] = pool
        return pool

    def _evict(self, room_for: int) -> None:
        live = sum(p.key.world for p in self._pools.values())
        while self._pools and live + room_for > MAX_LIVE_RANKS:
            _, oldest = self._pools.popitem(last=False)
            live -= oldest.key.world
            oldest.shutdown()

    def shutdown_all(self) -> None:
        while self._pools:
            _, pool = self._pools.popitem()
            pool.shutdown()
