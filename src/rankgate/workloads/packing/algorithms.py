"""Greedy and LPT assignment of sequences to (minibatch, rank) slots.

A *minibatch* is one forward/backward on every rank; within it, rank ``r`` processes
the sequences of its slot packed into one row of at most ``max_tokens_per_rank``
tokens. Fewer minibatches means fewer accumulation steps for the same global batch;
an even spread of tokens over the ranks of a minibatch means less waiting at its
gradient reduction.

greedy: sequences in the order given; fill rank 0 of the current minibatch until the
next one would overflow it, then rank 1, ...; after the last rank, a new minibatch.

lpt (longest processing time first): sequences longest first; each goes to the
least-loaded rank of the first minibatch where that rank still has room, else to a
new minibatch. Long sequences are placed while every rank is still empty, and the
short ones fill the gaps, so it needs fewer minibatches and balances them better.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rankgate.errors import RankgateError

PADDING = -1
"""Marks a slot whose rank has no sample in that minibatch (it runs a dummy sample)."""

Slots = list[list[list[int]]]  # [minibatch][rank] -> sample indices


class PackingError(RankgateError, ValueError):
    """Lengths, cap or world size that cannot be packed."""


@dataclass(frozen=True, slots=True)
class Packing:
    """Which samples each rank processes in each minibatch."""

    minibatches: tuple[tuple[tuple[int, ...], ...], ...]
    """``minibatches[m][r]``: sample indices of rank ``r`` in minibatch ``m``, or ``(PADDING,)``."""
    lengths: tuple[int, ...]
    """The sequence lengths that were packed, by sample index."""
    max_tokens_per_rank: int
    """The cap every slot respects."""
    world_size: int
    """Number of ranks; every minibatch has this many slots."""

    def for_rank(self, rank: int) -> list[tuple[int, ...]]:
        """Rank ``rank``'s slots, one per minibatch (the same count on every rank)."""
        if not 0 <= rank < self.world_size:
            raise PackingError(f"rank {rank} is outside 0..{self.world_size - 1}")
        return [minibatch[rank] for minibatch in self.minibatches]

    def loads(self) -> list[list[int]]:
        """Tokens per slot, ``loads()[m][r]`` (0 for a padding slot)."""
        return [
            [sum(self.lengths[i] for i in slot if i != PADDING) for slot in minibatch]
            for minibatch in self.minibatches
        ]


def _check(lengths: Sequence[int], max_tokens_per_rank: int, world_size: int) -> None:
    if world_size < 1:
        raise PackingError(f"world_size must be >= 1, got {world_size}")
    if max_tokens_per_rank < 1:
        raise PackingError(f"max_tokens_per_rank must be >= 1, got {max_tokens_per_rank}")
    for index, length in enumerate(lengths):
        if length < 1:
            raise PackingError(f"sample {index} has length {length}; drop empty samples first")
        if length > max_tokens_per_rank:
            raise PackingError(
                f"sample {index} has {length} tokens, more than max_tokens_per_rank="
                f"{max_tokens_per_rank}; drop or truncate oversize samples first (the "
                "data collator drops and counts them), or raise the cap"
            )


def _freeze(slots: Slots) -> tuple[tuple[tuple[int, ...], ...], ...]:
    return tuple(
        tuple(tuple(slot) if slot else (PADDING,) for slot in minibatch) for minibatch in slots
    )


def greedy(lengths: Sequence[int], max_tokens_per_rank: int, world_size: int) -> Packing:
    """Next-fit in the given order: fill one rank, then the next, then a new minibatch."""
    _check(lengths, max_tokens_per_rank, world_size)
    slots: Slots = []
    rank, load = world_size, 0  # start "after the last rank": the first sample opens one
    for index, length in enumerate(lengths):
        if rank < world_size and load + length <= max_tokens_per_rank:
            slots[-1][rank].append(index)
            load += length
            continue
        rank += 1
        if rank >= world_size:
            slots.append([[] for _ in range(world_size)])
            rank = 0
        slots[-1][rank].append(index)
        load = length
    return Packing(_freeze(slots), tuple(lengths), max_tokens_per_rank, world_size)


def lpt(lengths: Sequence[int], max_tokens_per_rank: int, world_size: int) -> Packing:
    """Longest first, each to the least-loaded rank of the first minibatch it fits in."""
    _check(lengths, max_tokens_per_rank, world_size)
    slots: Slots = []
    heaps: list[list[tuple[int, int]]] = []  # per minibatch: (load, rank), least loaded first
    # Longest first; equal lengths in index order, so the result is deterministic.
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        length = lengths[index]
        fits = (m for m, heap in enumerate(heaps) if heap[0][0] + length <= max_tokens_per_rank)
        minibatch = next(fits, len(heaps))
        if minibatch == len(heaps):
            heaps.append([(0, r) for r in range(world_size)])
            slots.append([[] for _ in range(world_size)])
        load, rank = heapq.heappop(heaps[minibatch])
        slots[minibatch][rank].append(index)
        heapq.heappush(heaps[minibatch], (load + length, rank))
    for minibatch in slots:  # samples of a slot in index order, as the data came
        for slot in minibatch:
            slot.sort()
    return Packing(_freeze(slots), tuple(lengths), max_tokens_per_rank, world_size)


ALGORITHMS: dict[str, Callable[[Sequence[int], int, int], Packing]] = {
    "greedy": greedy,
    "lpt": lpt,
}


def pack(
    lengths: Sequence[int], max_tokens_per_rank: int, world_size: int, algorithm: str = "lpt"
) -> Packing:
    """Pack ``lengths`` with the named algorithm (``greedy`` or ``lpt``)."""
    try:
        function = ALGORITHMS[algorithm]
    except KeyError:
        raise PackingError(
            f"unknown packing algorithm {algorithm!r}; use one of {', '.join(ALGORITHMS)}"
        ) from None
    return function(lengths, max_tokens_per_rank, world_size)
