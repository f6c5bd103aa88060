import os
import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(4)
def test_bug_on_rank_3(rank, world_size):
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 3:
        t[0] += 1  # the planted bug
    assert t.sum().item() == 4 * world_size


@pytest.mark.world(2, timeout=6)
def test_hang_on_rank_1(rank):
    t = torch.ones(1)
    if rank == 0:
        dist.all_reduce(t)  # rank 1 never joins


@pytest.mark.world(2)
def test_crash_on_rank_0(rank):
    if rank == 0:
        os.abort()
    dist.barrier()
