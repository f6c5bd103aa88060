"""The buffers ``rankgate bench comm`` times its calls on: made once per run, viewed per size.

Every measurement used to draw its own random input on the host and copy it to the
device: at 64 MiB that is a fifth of a second per backend, collective and round, paid
again by every backend at every size. Here each rank fills one input at the largest
size a run needs, once, on its device, and every measurement takes a prefix of it; the
buffers a call writes (the in-place all-reduce's, outputs) are prefixes of two more.
A prefix of a contiguous 1-D buffer starts where the buffer does, so the alignment a
p2p kernel wants holds at every size, and a CUDA graph captured on a view stays valid
for the whole run (the buffers outlive every graph).
"""

from __future__ import annotations

import torch

from rankgate.bench.busbw import fit_size

_SPREAD = 2**-10
"""Inputs are normals this small: sums of 20 in-place all-reduces stay finite."""


def elements_needed(collectives, sizes, itemsize: int, world: int) -> int:
    """The most elements any buffer of any measurement of this run holds."""
    most = 1
    for collective in collectives:
        for size in sizes:
            _, count = fit_size(collective, size, itemsize, world)
            wide = collective in ("all_gather", "reduce_scatter")
            most = max(most, count * world if wide else count)
    return most


class Buffers:
    """This rank's input (random, never written), a work buffer and an output buffer."""

    def __init__(self, numel: int, dtype: torch.dtype, device: torch.device, rank: int) -> None:
        gen = torch.Generator(device=device).manual_seed(rank)
        if dtype.is_floating_point:  # drawn in the dtype: no float32 copy of 2 GiB at -e 2G
            self.input = torch.randn(numel, generator=gen, device=device, dtype=dtype)
            self.input.mul_(_SPREAD)
        else:
            self.input = torch.randint(-8, 9, (numel,), generator=gen, dtype=torch.int32,
                                       device=device).to(dtype)  # fmt: skip
        self.work = torch.empty_like(self.input)
        self.output = torch.empty_like(self.input)

    def data(self, n: int) -> torch.Tensor:
        """The first ``n`` input elements (read, never written, by the timed calls)."""
        return self.input[:n]

    def work_copy(self, n: int) -> torch.Tensor:
        """The first ``n`` elements of the work buffer, holding the input's (written in place)."""
        return self.work[:n].copy_(self.input[:n])

    def out(self, n: int) -> torch.Tensor:
        """The first ``n`` elements of the output buffer (contents undefined)."""
        return self.output[:n]
