"""In place, what every rank collected, made one: the same tests in rank 0's order.

Each rank's pytest collects on its own, and the ranks' verdicts are merged test by
test, so every rank must run the same tests in the same order. A plugin that orders
tests at random (pytest-randomly) draws its own order on each rank: the same tests in
another order run in rank 0's order, and rank 0's seed of such a plugin becomes every
rank's, so what it reseeds before each test (``random``, numpy) starts the same on every
rank, as in the pool. Different tests are a usage error naming them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import NamedTuple

import pytest

from rankgate.harness import verdict_lines
from rankgate.harness.item_settings import NOT_ADOPTED_KEY, world_spec
from rankgate.launch.env import LaunchEnv

SESSION_SEEDS = ("randomly_seed",)
"""Options a plugin fills with a seed it drew in each process (pytest-randomly's)."""


class Collected(NamedTuple):
    """What one rank collected, sent to every rank."""

    ids: list[str]
    errors: list[str]
    where: tuple[str, int]
    """The rank's (host, pid)."""
    seeds: dict[str, object]


def collected(session: pytest.Session, errors: list[str], where: tuple[str, int]) -> Collected:
    option = session.config.option
    seeds = {name: getattr(option, name) for name in SESSION_SEEDS if hasattr(option, name)}
    return Collected([item.nodeid for item in session.items], errors, where, seeds)


def make_one(session: pytest.Session, everyone: list[Collected], log_dir: Path) -> None:
    """Run rank 0's tests in rank 0's order with rank 0's seeds, on this rank; every rank
    raises the same UsageError when the ranks collected different tests."""
    first = everyone[0]
    differing = [r for r, c in enumerate(everyone) if Counter(c.ids) != Counter(first.ids)]
    if differing:
        raise pytest.UsageError(_difference(everyone, differing, log_dir))
    for name, value in first.seeds.items():
        setattr(session.config.option, name, value)
    if [item.nodeid for item in session.items] != first.ids:
        by_id: dict[str, list[pytest.Item]] = {}
        for item in reversed(session.items):  # a test given twice runs twice
            by_id.setdefault(item.nodeid, []).append(item)
        session.items[:] = [by_id[nodeid].pop() for nodeid in first.ids]


def _difference(everyone: list[Collected], differing: list[int], log_dir: Path) -> str:
    first = everyone[0]
    lines = []
    for r in differing:
        only_here = sorted((Counter(everyone[r].ids) - Counter(first.ids)).elements())
        missing = sorted((Counter(first.ids) - Counter(everyone[r].ids)).elements())
        lines.append(
            f"rank {r} collected {len(everyone[r].ids)} tests, rank 0 {len(first.ids)}; "
            f"only on rank {r}: {only_here[:5]}; missing on rank {r}: {missing[:5]}"
        )
    for r in sorted({0, *differing}):
        log = "" if r == 0 else f" (its log: {log_dir / f'pytest.rank{r}.log'})"
        for error in everyone[r].errors:
            lines.append(f"rank {r} could not collect {error}{log}")
    return (
        "rankgate in-place: ranks collected different tests, so their results cannot be "
        "merged:\n  " + "\n  ".join(lines)
    )


def skip_reason(item: pytest.Item, launch: LaunchEnv, has_gpus: bool, backend: str) -> str | None:
    """Why this run skips the test, known before it starts (None: it runs)."""
    n = launch.world_size
    if item.get_closest_marker("launches") is not None:
        not_adopted = item.stash.get(NOT_ADOPTED_KEY, None)
        what = (
            f"runs its own way, not on rankgate's ranks ({not_adopted[0]}): {not_adopted[1]}"
            if not_adopted is not None
            else "starts pytest sessions or launchers of its own"
        )
        return (
            f"{what}: run it without a launcher (in place each of the "
            f"{verdict_lines.count(n, 'rank')} would start them)"
        )
    spec = world_spec(item)
    if spec is None:
        return None
    launched = f"{verdict_lines.count(n, 'rank')} launched by {launch.launcher}"
    if spec.size > n:  # a smaller world runs in a sub-world (schedule)
        needs = verdict_lines.count(spec.size, "rank")
        return f"world({spec.size}) needs {needs}; this run has {launched}"
    if spec.backend == "nccl" and not has_gpus:
        return f"backend 'nccl' requested; this run's process group is {backend}"
    return None
