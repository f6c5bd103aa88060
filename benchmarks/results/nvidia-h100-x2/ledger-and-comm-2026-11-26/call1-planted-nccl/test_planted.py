import time

import pytest
import torch
import torch.distributed as dist

BACKEND = "nccl"


@pytest.mark.world(2, backend=BACKEND, timeout=5)
def test_skipped_sync(rank, device):
    t = torch.ones(4, device=device)
    dist.broadcast(t, src=0)  # skipped_sync:broadcast
    if rank != 1:
        dist.all_reduce(t)  # skipped_sync:all_reduce
    dist.barrier()  # skipped_sync:barrier
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=5)
def test_skipped_async(rank, device):
    t = torch.ones(4, device=device)
    dist.broadcast(t, src=0)
    if rank == 0:
        work = dist.all_reduce(t, async_op=True)  # skipped_async:all_reduce
        time.sleep(0.5)
        work.wait()
    dist.barrier()  # skipped_async:barrier
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=5)
def test_mismatched_ops(rank, device):
    t = torch.ones(4, device=device)
    if rank == 0:
        dist.all_reduce(t)  # mismatched_ops:all_reduce
    else:
        dist.broadcast(t, src=1)  # mismatched_ops:broadcast
    dist.barrier()
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=5)
def test_mismatched_shapes(rank, device):
    t = torch.ones(4 if rank == 0 else 8, device=device)
    dist.all_reduce(t)  # mismatched_shapes:all_reduce
    dist.barrier()
    assert t.sum().item() == 2 * t.numel()


@pytest.mark.world(2, backend=BACKEND, timeout=5)
def test_subgroup_only_some_join(rank, device):
    pair = dist.new_group([0, 1])
    t = torch.ones(4, device=device)
    if rank == 0:
        dist.all_reduce(t, group=pair)  # subgroup:all_reduce
    dist.barrier()  # subgroup:barrier
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=5)
def test_only_rank_0_inside_an_if(rank, device):
    t = torch.ones(4, device=device)
    if rank == 0:
        dist.broadcast(t, src=0)  # only_rank_0:broadcast
    dist.all_reduce(t)  # only_rank_0:all_reduce
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=5)
def test_correct(rank, device):
    t = torch.ones(4, device=device)
    dist.broadcast(t, src=0)
    dist.all_reduce(t)
    dist.barrier()
    assert t.sum().item() == 8
