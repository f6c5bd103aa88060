"""The harness on GPUs: NCCL pools, the device fixture and per-test CUDA resets.

Collected everywhere, skipped (with the GPU count) where there are too few GPUs.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(1, backend="nccl")
def test_single_gpu_rank(rank, device):
    assert device == torch.device("cuda", 0)
    assert dist.get_backend() == "nccl"
    t = torch.ones(4, device=device)
    dist.all_reduce(t)
    assert t.sum().item() == 4


@pytest.mark.world(2, backend="nccl")
def test_nccl_all_reduce_on_each_rank_gpu(rank, world_size, device):
    assert device == torch.device("cuda", rank)
    assert torch.cuda.current_device() == rank
    t = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(t)
    assert torch.all(t == sum(range(1, world_size + 1))).item()


@pytest.mark.world(2, backend="nccl")
def test_peak_memory_is_reset_between_tests_part_1(device):
    big = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    assert torch.cuda.max_memory_allocated(device) >= 256 << 20
    del big


@pytest.mark.world(2, backend="nccl")
def test_peak_memory_is_reset_between_tests_part_2(device):
    assert torch.cuda.max_memory_allocated(device) < 256 << 20


@pytest.mark.world(2, backend="nccl", timeout=30)
def test_next_after_gpu_tests_is_healthy(rank, device):
    t = torch.tensor([rank], device=device)
    dist.broadcast(t, src=1)
    assert t.item() == 1


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
)
def test_xdist_workers_get_disjoint_gpus(inner):
    seen = inner.env_seen_per_xdist_worker("world(1, backend='nccl')", "CUDA_VISIBLE_DEVICES")
    assert sorted(seen) == ["gw0", "gw1"]
    assert seen["gw0"].isdisjoint(seen["gw1"]), seen
