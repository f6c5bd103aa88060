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

With ini ``rankgate_one_world_per_rank`` (a suite whose set-up happens once per process,
for the first world the process joins), each rank joins at most one world of two or more
ranks, as a pool's rank does (``one_world_blocks``); world(1) tests still run on any rank.
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
    items: list[pytest.Item],
    n: int,
    skip_reason: Callable[[pytest.Item], str | None],
    one_world_per_rank: bool = False,
) -> tuple[list[tuple[pytest.Item, Share]], dict[str, str]]:
    """Every test with its share, in the order the run takes them (see the module doc),
    and the tests the placement leaves out, each with the reason (only with
    ``one_world_per_rank``: a world that does not fit beside the smaller ones)."""
    by_k: dict[int, list[pytest.Item]] = {}
    plain = []
    for item in items:
        spec = world_spec(item)
        if skip_reason(item) is not None:
            plain.append(item)  # reported once, by the rank it is dealt to
        elif spec is not None:  # a larger world than n is skip_reason's to skip
            by_k.setdefault(min(spec.size, n), []).append(item)
        elif item.get_closest_marker(EVERY_RANK_MARKER) is not None:
            by_k.setdefault(n, []).append(item)
        else:
            plain.append(item)
    blocks = one_world_blocks(sorted(by_k), n) if one_world_per_rank else None
    left_out: dict[str, str] = {}
    out = []
    for phase, k in enumerate(sorted(by_k, reverse=True), start=0 if n in by_k else 1):
        if blocks is None or k == 1:  # a one-rank world has no peer to set up with
            subworlds = [tuple(range(s * k, (s + 1) * k)) for s in range(n // k)]
        elif k in blocks:
            subworlds = blocks[k]
        else:
            for item in by_k[k]:
                left_out[item.nodeid] = _no_block_reason(item, k, sorted(by_k), blocks)
            plain.extend(by_k[k])
            continue
        for j, item in enumerate(by_k[k]):
            s = j % len(subworlds)
            out.append((item, Share(subworlds[s], phase, s, world_spec(item) is not None)))
    for j, item in enumerate(plain):
        out.append((item, Share((j % n,), PLAIN_PHASE, 0, False)))
    return out, left_out


def one_world_blocks(sizes: list[int], n: int) -> dict[int, list[tuple[int, ...]]]:
    """Disjoint blocks of ranks, so each rank joins one world of two or more ranks: the
    sizes from the smallest up while they fit beside each other (the most sizes that fit;
    a size that runs at n ranks runs at every larger n too), then more blocks of the
    smallest from the ranks left, so its tests run side by side."""
    blocks: dict[int, list[tuple[int, ...]]] = {}
    first = 0
    for k in (k for k in sorted(sizes) if k > 1):
        if first + k > n:
            break
        blocks[k] = [tuple(range(first, first + k))]
        first += k
    if blocks:
        smallest = min(blocks)
        while first + smallest <= n:
            blocks[smallest].append(tuple(range(first, first + smallest)))
            first += smallest
    return blocks


def _no_block_reason(
    item: pytest.Item, k: int, sizes: list[int], blocks: dict[int, list[tuple[int, ...]]]
) -> str:
    what = f"world({k})" if world_spec(item) is not None else f"every_rank (a world of {k})"
    taken = ", ".join(
        f"world({size}) on ranks " + " and ".join(f"{b[0]}-{b[-1]}" for b in blocks[size])
        for size in sorted(blocks)
    )
    needs = sum(size for size in sizes if 1 < size <= k)
    return (
        f"{what} needs {k} ranks that joined no other world (ini "
        f"rankgate_one_world_per_rank), and this run's ranks are taken: {taken}; "
        f"a launch of {needs} ranks runs it, as does the pool"
    )


class Schedule:
    """This run's plan as one rank reads it: which ranks run each test, its place in the
    run, its name in store keys, and what a test's fixtures see of its world.

    Made empty with the session; :meth:`make` fills it once every rank collected the same
    tests. Plain data: it touches no store and no process group.
    """

    def __init__(self, rank: int, world_size: int, one_world_per_rank: bool = False) -> None:
        self.rank, self.world_size = rank, world_size
        self.one_world_per_rank = one_world_per_rank
        """ini ``rankgate_one_world_per_rank``: each rank joins one world of 2+ ranks."""
        self.left_out: dict[str, str] = {}
        """Tests the placement leaves out, each with the reason they are skipped."""
        self.index: dict[str, int] = {}
        """Each test's place in the run, alike on every rank."""
        self.shares: dict[str, Share] = {}
        self.planned: list[tuple[pytest.Item, Share]] = []
        """Every rank's tests in run order, each with its share (the plan file's)."""
        self.run_tests = 0
        """How many tests the run has, over every rank's share."""
        self.longest_timeout = 0.0
        """Of the run's tests: how long a peer may still be in one."""

    def make(
        self,
        items: list[pytest.Item],
        skip_reason: Callable[[pytest.Item], str | None],
        timeout_of: Callable[[pytest.Item], float],
    ) -> list[pytest.Item]:
        """Plan the run's ``items`` (``plan``); returns this rank's share, in run order.
        ``skip_reason``: the run's skips known from a test alone (``left_out_reason``
        adds the placement's)."""
        planned, self.left_out = plan(items, self.world_size, skip_reason, self.one_world_per_rank)
        self.planned = planned
        self.index = {item.nodeid: i for i, (item, _) in enumerate(planned)}
        self.shares = {item.nodeid: share for item, share in planned}
        self.run_tests = len(planned)
        self.longest_timeout = max((timeout_of(item) for item, _ in planned), default=0.0)
        return [item for item, share in planned if self.rank in share.ranks]

    def left_out_reason(self, nodeid: str) -> str | None:
        """Why the placement skips the test (None: it runs, or is not planned yet)."""
        return self.left_out.get(nodeid)

    def in_run(self, nodeid: str) -> bool:
        return nodeid in self.index

    def place(self, nodeid: str) -> int:
        """A test's place in the run (-1 outside it): the others' tests are named in order."""
        return self.index.get(nodeid, -1)

    def store_key(self, nodeid: str, attempt: int = 1) -> int | str | None:
        """The test's name in store keys (``t<key>/...``): its index in the run, and from
        its second attempt on the attempt too, so no attempt reads an earlier one's
        outcomes (None for a test outside the run's list)."""
        index = self.index.get(nodeid)
        if index is None or attempt == 1:
            return index
        return f"{index}.{attempt}"

    def share_of(self, nodeid: str) -> Share | None:
        return self.shares.get(nodeid)

    def ranks_of(self, nodeid: str) -> tuple[int, ...]:
        """The global ranks that run the test (every rank, for a test outside the plan)."""
        share = self.shares.get(nodeid)
        return tuple(range(self.world_size)) if share is None else share.ranks

    def first_to_run(self, nodeid: str) -> bool:
        """This rank is the first of the test's ranks: it speaks for them at the end."""
        return self.ranks_of(nodeid)[0] == self.rank

    def rank_in_test(self, nodeid: str) -> int:
        """The ``rank`` fixture: a world test's rank in its (sub-)world; 0 in a plain test
        shared out to one rank, as in the pool; the global rank in an every_rank test."""
        share = self.shares.get(nodeid)
        if share is not None and share.plain:
            return 0
        if share is None or not share.world_test:
            return self.rank
        return share.local_rank(self.rank)

    def world_in_test(self, nodeid: str) -> int:
        """The ``world_size`` fixture: a world test's (sub-)world size; 1 in a plain test
        shared out to one rank, as in the pool; the launched size in an every_rank test."""
        share = self.shares.get(nodeid)
        if share is not None and share.plain:
            return 1
        if share is None or not share.world_test:
            return self.world_size
        return len(share.ranks)

    def every_rank_hint(self, nodeid: str, entries=None, in_collective: bool = False) -> str:
        """``EVERY_RANK_HINT`` for a plain test shared out to one rank that used the
        default group (its ledger ``entries`` name it, or it hung or failed
        ``in_collective``, as any collective does there: it has no group), else ''."""
        share = self.shares.get(nodeid)
        if share is None or not share.plain:
            return ""
        used = any(e.get("group") in ("world", "p2p:world") for e in entries or ())
        return EVERY_RANK_HINT if used or in_collective else ""
