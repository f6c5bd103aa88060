"""In place, which ranks run which test: the same plan, made on every rank from the same
collected tests, so no rank asks another what to run.

With N launched ranks, the tests run in phases, each on one kind of group:

1. world(N) tests and tests marked ``every_rank``: every rank, on the launcher's group;
2. for each k < N (largest first), world(k) tests: the ranks split into N // k
   sub-worlds of k consecutive ranks (ranks 0..k-1, k..2k-1, ...), and the phase's tests
   are dealt round-robin to them, so each sub-world runs a different test at a time.
   Ranks beyond the last whole sub-world (N % k of them) have no test in that phase;
3. plain tests, and tests the run skips before they start (world(k) with k > N, say):
   dealt round-robin to the ranks, each run (or skipped) on one rank with no process
   group, as a pool runs them in its controller: a rank leaves its sub-world's group
   before its first plain test, so no plain test meets another rank's collective.

Each rank runs only its share; every rank's files name only the tests it ran, with the
global ranks that ran each, so merge-junit merges a test from those ranks' files only.
A phase's sub-worlds are made once (one group change per k on each rank).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import pytest

from rankgate.harness.item_settings import world_spec

EVERY_RANK_MARKER = "every_rank"
EVERY_RANK_HINT = (
    "a plain test runs on one rank in place, as in the pool; one that uses the launcher's "
    "group needs @pytest.mark.every_rank"
)
"""What a plain test shared out to one rank is told when it used the default group: it
has none (``NO_GROUP``), as in the pool's controller."""
WHOLE_WORLD = (0, 0)
"""The (phase, sub-world) of the launcher's group over every rank."""
PLAIN_PHASE = -1
"""The phase of plain tests: no process group."""
NO_GROUP = (PLAIN_PHASE, 0)
"""The (phase, sub-world) of a plain test: ``torch.distributed`` is not initialized."""


class Share(NamedTuple):
    """Which ranks run one test, and on which group."""

    ranks: tuple[int, ...]
    """The global ranks that run it, in the order of their ranks in its group."""
    phase: int
    """0: every rank's group; PLAIN_PHASE: no group (a plain test); k's phase otherwise."""
    subworld: int
    """The sub-world's number in its phase (0 in phase 0)."""
    world_test: bool
    """A world(k) test: its body sees a group of ``len(ranks)`` ranks."""

    @property
    def group(self) -> tuple[int, int]:
        return (self.phase, self.subworld)

    @property
    def plain(self) -> bool:
        """A plain test shared out to one rank: it runs with no process group."""
        return self.phase == PLAIN_PHASE

    def local_rank(self, rank: int) -> int:
        return self.ranks.index(rank)


def plan(
    items: list[pytest.Item], n: int, skip_reason: Callable[[pytest.Item], str | None]
) -> list[tuple[pytest.Item, Share]]:
    """Every test with its share, in the order the run takes them (see the module doc)."""
    whole, by_k, plain = [], {}, []
    for item in items:
        spec = world_spec(item)
        if skip_reason(item) is not None:
            plain.append(item)  # reported once, by the rank it is dealt to
        elif spec is not None and spec.size < n:
            by_k.setdefault(spec.size, []).append(item)
        elif spec is not None or item.get_closest_marker(EVERY_RANK_MARKER) is not None:
            whole.append(item)
        else:
            plain.append(item)
    everyone = tuple(range(n))
    out = [(item, Share(everyone, 0, 0, world_spec(item) is not None)) for item in whole]
    for phase, k in enumerate(sorted(by_k, reverse=True), start=1):
        subworlds = n // k
        for j, item in enumerate(by_k[k]):
            s = j % subworlds
            out.append((item, Share(tuple(range(s * k, (s + 1) * k)), phase, s, True)))
    for j, item in enumerate(plain):
        out.append((item, Share((j % n,), PLAIN_PHASE, 0, False)))
    return out
