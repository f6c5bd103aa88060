import pytest
import torch
import torch.distributed as dist


def _sum(rank):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return t.item()


@pytest.mark.world(1)
@pytest.mark.parametrize("i", range(4))
def test_w1(rank, i):
    assert _sum(rank) == 1.0


@pytest.mark.world(2)
@pytest.mark.parametrize("i", range(4))
def test_w2(rank, i):
    assert _sum(rank) == 3.0


@pytest.mark.world(3)
@pytest.mark.parametrize("i", range(3))
def test_w3(rank, i):
    assert _sum(rank) == 6.0


@pytest.mark.world(4)
@pytest.mark.parametrize("i", range(3))
def test_w4(rank, i):
    assert _sum(rank) == 10.0


@pytest.mark.parametrize("i", range(5))
def test_plain(i):
    assert torch.ones(3).sum().item() == 3.0
