"""What ``rankgate bench comm`` makes once per run instead of once per size and backend:
the host check's reference and the buffers the timed calls use."""

from __future__ import annotations

import pytest
import torch

from rankgate.bench.commbuffers import Buffers, elements_needed
from rankgate.bench.commchecks import HostChecks

pytestmark = pytest.mark.unit


class OneRank:
    """A backend of one rank: all_reduce leaves the tensor as it is (or zeroes it)."""

    world_size, rank, device = 1, 0, torch.device("cpu")

    def __init__(self, broken: bool = False) -> None:
        self.broken = broken
        self.calls = 0

    def all_reduce(self, tensor):
        self.calls += 1
        return tensor.zero_() if self.broken else tensor


def test_the_reference_is_built_once_per_size_for_every_backend():
    checks = HostChecks(torch.float32)
    good, other, broken = OneRank(), OneRank(), OneRank(broken=True)
    assert checks.wrong(good, "all_reduce", 256) == 0
    assert checks.wrong(other, "all_reduce", 256) == 0
    assert checks.wrong(broken, "all_reduce", 256) > 0  # zeros where the integers were
    assert checks.references_built == 1  # one size: one reference for three backends
    assert checks.wrong(good, "all_reduce", 1024) == 0
    assert checks.references_built == 2 and good.calls == 2


def test_buffers_hold_the_largest_size_and_every_size_is_a_view():
    world, itemsize = 4, 4
    sizes = [1024, 4096]
    # all_reduce of 4 KiB: 1024 elements; all_gather's output and reduce_scatter's input
    # hold world x count = 1024 too; a size below world x itemsize still needs world
    assert elements_needed(["all_reduce", "reduce_scatter"], sizes, itemsize, world) == 1024
    assert elements_needed(["all_gather"], [8], itemsize, world) == world
    buffers = Buffers(1024, torch.float32, torch.device("cpu"), rank=1)
    pristine = buffers.input.clone()
    small, large = buffers.data(256), buffers.data(1024)
    assert small.data_ptr() == large.data_ptr() == buffers.input.data_ptr()
    work = buffers.work_copy(256)
    assert torch.equal(work, small) and work.data_ptr() == buffers.work.data_ptr()
    work.mul_(2)  # an in-place call writes the work buffer, never the input
    assert torch.equal(buffers.input, pristine)
    assert buffers.out(8).data_ptr() == buffers.output.data_ptr()
    assert torch.isfinite(buffers.input).all() and buffers.input.abs().max() < 1
    ints = Buffers(64, torch.int32, torch.device("cpu"), rank=0).input
    assert ints.dtype == torch.int32 and ints.abs().max() <= 8
