import os
import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(1)
def test_world1(rank, world_size):
    assert (rank, world_size) == (0, 1)


@pytest.mark.parametrize("n", [pytest.param(n, marks=pytest.mark.world(n), id=f"w{n}") for n in (2, 3, 4)])
def test_all_reduce(n, rank, world_size, device):
    t = torch.full((8,), float(rank + 1), device=device)
    dist.all_reduce(t)
    assert t[0].item() == world_size * (world_size + 1) / 2


@pytest.mark.world(2)
@pytest.mark.parametrize("i", range(6))
def test_many_small(i, rank):
    t = torch.tensor([i + rank])
    dist.all_reduce(t)
    assert t.item() == 2 * i + 1


@pytest.mark.world(2)
def test_policy_is_the_launchers(rank):
    # this project's own check: the body runs under the default policy
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


def test_plain():
    assert sum(range(4)) == 6


@pytest.mark.parametrize("x", range(4))
def test_plain_param(x):
    assert x * 0 == 0
