"""How good a packing is, and how long it took to compute."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from rankgate.workloads.packing.algorithms import Packing, pack


@dataclass(frozen=True, slots=True)
class PackingMetrics:
    """Figures of one packing; ``asdict`` gives the JSON row of ``rankgate bench packing``."""

    algorithm: str
    """``greedy`` or ``lpt``."""
    minibatches: int
    """Minibatches (accumulation steps) every rank runs."""
    balance: float
    """Mean over minibatches of min(rank load) / max(rank load); 1.0 is perfectly even."""
    efficiency: float
    """tokens / (minibatches x ranks x cap): the share of the token budget that is used."""
    seconds: float
    """Median wall time of one packing, in seconds."""

    def as_dict(self) -> dict:
        return asdict(self)


def metrics_of(packing: Packing, algorithm: str, seconds: float = 0.0) -> PackingMetrics:
    loads = packing.loads()
    count = len(loads)
    tokens = sum(packing.lengths)
    if count == 0:
        return PackingMetrics(algorithm, 0, 1.0, 1.0, seconds)
    balance = statistics.fmean(min(row) / max(row) for row in loads)
    budget = count * packing.world_size * packing.max_tokens_per_rank
    return PackingMetrics(algorithm, count, balance, tokens / budget, seconds)


def measure(
    algorithm: str,
    lengths: Sequence[int],
    max_tokens_per_rank: int,
    world_size: int,
    repeats: int = 3,
) -> PackingMetrics:
    """Pack ``repeats`` times (the result is deterministic) and report the median time."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    times, packing = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        packing = pack(lengths, max_tokens_per_rank, world_size, algorithm)
        times.append(time.perf_counter() - start)
    return metrics_of(packing, algorithm, statistics.median(times))
