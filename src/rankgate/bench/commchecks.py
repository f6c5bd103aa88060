"""``rankgate bench comm``'s host check of each result (nccl-tests' #wrong), done once.

One call on reference inputs, compared on the host with the exact result. The
reference (every rank's input, built on each rank, and the expected result) is the
costly part: at 64 MiB on 4 ranks it is a quarter of a gigabyte drawn and summed on
the host. It depends on the collective and the size only, so it is built once per
size and every backend at that size is checked against it (the sweep times every
backend at one size before the next size). Only the final sweep checks: the
calibrating sweep's single backends are the same backends, checked there.
"""

from __future__ import annotations

import torch

from rankgate.workloads.comm.reference import expected, mismatches, rank_input, run_collective


class HostChecks:
    """#wrong of each backend's call on this rank, against one reference per size."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self._key: tuple[str, int] | None = None
        self._reference: tuple[list[torch.Tensor], object] | None = None
        self.references_built = 0
        """How many references were built (one per collective and size)."""

    def wrong(self, backend, collective: str, count: int) -> int:
        """Elements wrong on this rank after one ``collective`` of ``count`` on ``backend``."""
        inputs, want = self._reference_for(backend, collective, count)
        return _wrong(backend, collective, count, inputs, want)

    def _reference_for(self, backend, collective: str, count: int):
        if self._key != (collective, count):
            self._reference = None  # the last size's, freed before the next is built
            world, rank = backend.world_size, backend.rank
            numel = world * count if collective == "reduce_scatter" else count
            inputs = [rank_input(r, numel, self.dtype, seed=numel) for r in range(world)]
            self._reference = inputs, expected(collective, inputs, rank)
            self._key = (collective, count)
            self.references_built += 1
        return self._reference


def _wrong(backend, collective: str, count: int, inputs, want) -> int:
    world, rank = backend.world_size, backend.rank
    if collective == "send_recv":  # the simultaneous exchange this benchmark times
        got = torch.empty(count, dtype=inputs[rank].dtype, device=backend.device)
        mine = inputs[rank].to(backend.device)
        backend.send_recv(mine, (rank + 1) % world, got, (rank - 1) % world)
    else:
        got = run_collective(backend, collective, inputs)
    if collective == "gather":
        if want is None:
            return 0 if got is None else 1
        return sum(mismatches(g, w) for g, w in zip(got, want))
    return mismatches(got, want)
