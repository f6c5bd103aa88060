import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2)
@pytest.mark.parametrize("i", range(400))
def test_sum(rank, i):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2.0


@pytest.mark.world(2)
def test_zz_dump(rank):
    import rankprof
    rankprof.PROFILER.disable()
    rankprof.PROFILER.dump_stats(f"rank{rank}.prof")
