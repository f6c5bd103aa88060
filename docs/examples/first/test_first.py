import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2)
def test_sum(rank, device):
    t = torch.ones(1, device=device) * (rank + 1)
    dist.all_reduce(t)
    assert t.item() == 3  # 1 + 2, on every rank


@pytest.mark.world(2)
def test_every_rank_gets_three_samples(rank, world_size):
    samples = list(range(5))
    mine = samples[rank::world_size]  # rank 0: 0, 2, 4; rank 1: 1, 3
    assert len(mine) == 3
