"""Which query rows meet which key rows at each step of the ring.

At step ``s`` rank ``r`` holds the key/value shard of rank ``source = (r - s) mod cp``.
A plan lists the blocks to compute then: local query rows ``q`` against rows ``k`` of
the visiting shard, masked causally or not. Plans are small frozen values (the same
one drives the forward and the backward pass), checked in ``tests/workloads`` to cover
each (query, key) pair of the global mask exactly once.

Step 0 (``source == rank``) always covers every local query row, with disjoint row
ranges: the ring assigns those results and merges the later ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise


@dataclass(frozen=True, slots=True)
class Block:
    """Local query rows ``[q[0], q[1])`` against visiting key rows ``[k[0], k[1])``."""

    q: tuple[int, int]
    k: tuple[int, int]
    causal: bool


@dataclass(frozen=True, slots=True)
class DualChunkPlan:
    """Shards from :class:`rankgate.workloads.cp.DualChunkSharding`: causal or full.

    ``local_cu_seqlens`` delimits the sequences within a shard ((0, n) for BSHD); each
    sequence's local rows are its chunk ``r`` then its chunk ``2·cp-1-r``. Causal:
    the own shard is one causal block per sequence; an earlier rank's shard (whose
    first chunk precedes both of ours and whose second follows both) meets all our
    rows with its first half; a later rank's shard meets only our second chunk, all
    of its rows. Every step is half of a full block's work: balanced.
    """

    local_cu_seqlens: tuple[int, ...]
    causal: bool = True

    def __post_init__(self) -> None:
        bounds = self.local_cu_seqlens
        if len(bounds) < 2 or bounds[0] != 0:
            raise ValueError(f"local_cu_seqlens={bounds} must start at 0 and hold a sequence")
        for i, (a, b) in enumerate(pairwise(bounds)):
            if b <= a or (self.causal and (b - a) % 2):
                raise ValueError(
                    f"local sequence {i} has {b - a} rows ({a} to {b}): causal dual-chunk shards "
                    "hold two equal chunks per sequence (shard with DualChunkSharding)"
                )

    def blocks(self, rank: int, source: int) -> tuple[Block, ...]:
        out = []
        for a, b in pairwise(self.local_cu_seqlens):
            half = a + (b - a) // 2
            if not self.causal:
                out.append(Block((a, b), (a, b), False))
            elif source == rank:
                out.append(Block((a, b), (a, b), True))
            elif source < rank:
                out.append(Block((a, b), (a, half), False))
            else:
                out.append(Block((half, b), (a, b), False))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    """Contiguous shards of ``local`` rows; attention only within segments of ``segment``
    rows (global row ``i`` is in segment ``i // segment``), causal or not.

    Used by dilated attention on each head group's dilated subsequence.
    """

    local: int
    segment: int
    causal: bool = False

    def __post_init__(self) -> None:
        if self.local < 1 or self.segment < 1:
            raise ValueError(f"SegmentPlan needs local >= 1 and segment >= 1, got {self}")

    def blocks(self, rank: int, source: int) -> tuple[Block, ...]:
        if self.causal and source > rank:
            return ()
        n, u = self.local, self.segment
        q0, k0 = rank * n, source * n
        out = []
        for seg in range(q0 // u, (q0 + n - 1) // u + 1):
            s0, s1 = seg * u, (seg + 1) * u
            qa, qb = max(s0, q0), min(s1, q0 + n)
            ka, kb = max(s0, k0), min(s1, k0 + n)
            if qa < qb and ka < kb:
                causal = self.causal and source == rank
                out.append(Block((qa - q0, qb - q0), (ka - k0, kb - k0), causal))
        return tuple(out)
