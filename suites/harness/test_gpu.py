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
    result = inner(
        """
        import os
        import pytest

        @pytest.fixture
        def where(tmp_path_factory):
            out = tmp_path_factory.getbasetemp().parent / "where"
            out.mkdir(exist_ok=True)
            return out

        @pytest.mark.world(1, backend="nccl")
        @pytest.mark.parametrize("i", range(4))
        def test_where(i, where):
            worker = os.environ["PYTEST_XDIST_WORKER"]
            (where / f"{worker}-{i}").write_text(os.environ["CUDA_VISIBLE_DEVICES"])
        """,
        "-n",
        "2",
        "--basetemp",
        str(inner.pytester.path / "bt"),
        subprocess=True,
    )
    result.assert_outcomes(passed=4)
    seen: dict[str, set[str]] = {}
    for f in (inner.pytester.path / "bt" / "where").iterdir():
        seen.setdefault(f.name.split("-")[0], set()).add(f.read_text())
    assert sorted(seen) == ["gw0", "gw1"]
    assert seen["gw0"].isdisjoint(seen["gw1"]), seen
