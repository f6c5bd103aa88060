"""Shard K of N by measured time: greedy longest-processing-time (LPT).

Tests are taken longest first and each goes to the shard with the least predicted time
so far. A test the durations file does not know is predicted at the mean of the known
ones among the tests being split (1 s when none is known), so new tests spread evenly.

The answer depends on the node ids and their times only, never on collection order:
ties are broken by node id, then by the shard holding fewer tests, then by the lower
shard number. Every rank of an in-place run, and every machine that collects the same
tests, picks the same shard for each test.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rankgate.errors import RankgateError

UNKNOWN_WHEN_NONE_KNOWN_S = 1.0


class ShardSpecError(RankgateError, ValueError):
    """``K/N`` that names no shard."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> (2, 4); shards count from 1. Raises :class:`ShardSpecError`."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not match:
        raise ShardSpecError(
            f"--rankgate-shard {text!r}: write K/N with whole numbers, e.g. 1/2 for the "
            "first of two shards"
        )
    k, n = int(match.group(1)), int(match.group(2))
    if n < 1 or not 1 <= k <= n:
        raise ShardSpecError(
            f"--rankgate-shard {text!r}: K must be 1 to N and N at least 1 (shards count "
            f"from 1), got K={k}, N={n}"
        )
    return k, n


@dataclass(frozen=True, slots=True)
class Split:
    """Which shard each test lands in, and the predicted time of each shard."""

    shard_of: tuple[int, ...]
    """For each test, in the order given, its shard (1..N)."""
    predicted_s: tuple[float, ...]
    """Predicted seconds of shards 1..N."""
    counts: tuple[int, ...]
    """Tests in shards 1..N."""
    unknown: int
    """Tests the durations did not know (predicted at ``fallback_s``)."""
    fallback_s: float

    def members(self, shard: int) -> list[int]:
        """Indices of the tests in ``shard`` (1-based), in the order given."""
        return [i for i, s in enumerate(self.shard_of) if s == shard]

    @property
    def imbalance(self) -> float:
        """Longest predicted shard over the shortest, minus 1 (0.08 = 8 % apart)."""
        low, high = min(self.predicted_s), max(self.predicted_s)
        return 0.0 if high == 0 else (float("inf") if low == 0 else high / low - 1)


def split(node_ids: Sequence[str], durations: Mapping[str, float], shards: int) -> Split:
    """Assign each of ``node_ids`` to one of ``shards`` shards (see the module docstring)."""
    if shards < 1:
        raise ShardSpecError(f"shards must be at least 1, got {shards}")
    known = [durations[n] for n in node_ids if n in durations]
    fallback = sum(known) / len(known) if known else UNKNOWN_WHEN_NONE_KNOWN_S
    times = [durations.get(n, fallback) for n in node_ids]
    order = sorted(range(len(node_ids)), key=lambda i: (-times[i], node_ids[i], i))
    load = [0.0] * shards
    count = [0] * shards
    shard_of = [0] * len(node_ids)
    for i in order:
        best = min(range(shards), key=lambda s: (load[s], count[s], s))
        shard_of[i] = best + 1
        load[best] += times[i]
        count[best] += 1
    return Split(
        shard_of=tuple(shard_of),
        predicted_s=tuple(load),
        counts=tuple(count),
        unknown=len(node_ids) - len(known),
        fallback_s=fallback,
    )
