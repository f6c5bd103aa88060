"""The smallest distributed check: the one the container stage runs inside the image."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2)
def test_all_reduce_sums_every_rank(rank, world_size):
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    assert value.item() == world_size * (world_size + 1) / 2
