import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2)
def test_every_rank_gets_three_samples(rank, world_size, device):
    samples = list(range(5))
    mine = samples[rank::world_size]  # rank 0: 0, 2, 4; rank 1: 1, 3
    seen = torch.tensor([len(mine)], device=device)
    dist.all_reduce(seen)  # on every rank: 3 + 2
    assert seen.item() == 5
    assert len(mine) == 3
