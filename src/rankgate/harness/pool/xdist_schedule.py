"""xdist's ``load`` scheduling with world affinity (see :mod:`.xdist_ranks`).

Only which pending tests go to a worker changes: xdist still decides when and how
many. Imported only by the controller, when pytest-xdist asks for a scheduler.
"""

from __future__ import annotations

import json
from pathlib import Path

from xdist.scheduler import LoadScheduling

MIN_SHARE = 2
"""A worker with nothing else to run takes a share of another worker's world size (and
starts a pool for it) only when that many of its tests are not yet sent; fewer wait for
their worker, and the idle one ends with the run (xdist ends a worker left idle)."""


class WorldAffinityScheduling(LoadScheduling):
    """``--dist load``, choosing for each worker: tests of the world groups it has,
    one world group nobody has, plain tests, then a share of the busiest group."""

    def __init__(self, config, log, groups_file: Path, limit: int) -> None:
        super().__init__(config, log)
        self._limit = limit
        self._groups_file = groups_file
        self._groups: list[str | None] | None = None
        self._node_groups: dict[object, set[str]] = {}

    def _group_of_each(self) -> list[str | None]:
        """Each collected test's world group, by its index; [] when no worker said."""
        if self._groups is None:
            try:
                by_id = json.loads(self._groups_file.read_text())
            except (OSError, ValueError):
                by_id = {}
            self._groups = [by_id.get(nodeid) for nodeid in self.collection] if by_id else []
        return self._groups

    def _send_tests(self, node, num: int) -> None:
        groups = self._group_of_each()
        if not groups:
            return super()._send_tests(node, num)
        chosen = self._choose(node, num, groups)
        if chosen:
            taken = set(chosen)
            self.pending[:] = [i for i in self.pending if i not in taken]
            self.node2pending[node].extend(chosen)
            node.send_runtest_some(chosen)

    def _choose(self, node, num: int, groups: list[str | None]) -> list[int]:
        mine = self._node_groups.setdefault(node, set())
        others = set().union(*(g for n, g in self._node_groups.items() if n is not node))
        chosen = [i for i in self.pending if groups[i] in mine][:num]
        if len(chosen) < num:
            taken = others | mine
            free = [i for i in self.pending if groups[i] is not None and groups[i] not in taken]
            if free and self._fits_beside_others(node, groups[free[0]], groups):
                group = groups[free[0]]
                chosen += [i for i in free if groups[i] == group][: num - len(chosen)]
        if len(chosen) < num:
            chosen += [i for i in self.pending if groups[i] is None][: num - len(chosen)]
        if not chosen and self.pending:
            chosen = self._share_of_busiest(node, num, groups)
        mine.update(groups[i] for i in chosen if groups[i] is not None)
        return sorted(chosen)

    def _share_of_busiest(self, node, num: int, groups: list[str | None]) -> list[int]:
        counts: dict[str, int] = {}
        for i in self.pending:
            counts[groups[i]] = counts.get(groups[i], 0) + 1
        busiest = max(counts, key=counts.get)
        if counts[busiest] < MIN_SHARE or not self._fits_beside_others(node, busiest, groups):
            return []  # a pool of its own is not worth starting, or could not run beside
        return [i for i in self.pending if groups[i] == busiest][:num]

    def _fits_beside_others(self, node, group: str, groups: list[str | None]) -> bool:
        """Whether a pool for ``group`` could run beside the pools the other workers'
        queued tests use, within the rank budget; where it could not, the budget would
        run them one after the other anyway, and a worker that already has pools (and
        its fork server) takes the group later instead of this one starting its own."""
        busy = 0
        for other, queued in self.node2pending.items():
            worlds = [_world(groups[i]) for i in queued if other is not node and groups[i]]
            busy += max(worlds, default=0)
        return busy == 0 or busy + _world(group) <= self._limit


def _world(group: str) -> int:
    return int(group.split("/", 1)[0])
