"""Back-to-back small collectives (buffer-reuse races) and memory across create/destroy."""

from __future__ import annotations

import gc
import os

import pytest
import torch
from commcase import cached_backend

from rankgate.workloads.comm import create_backend
from rankgate.workloads.comm.detect import TorchCudaProbe

BACKENDS = [
    pytest.param("gloo", marks=pytest.mark.world(2, backend="gloo"), id="gloo"),
    pytest.param("nccl", marks=pytest.mark.world(2, backend="nccl"), id="nccl"),
    pytest.param("p2p", marks=pytest.mark.world(2, backend="nccl"), id="p2p"),
]


def _dev(name, device):
    return torch.device("cpu") if name == "gloo" else device


@pytest.mark.parametrize("numel", [1, 1024])
@pytest.mark.parametrize("name", BACKENDS)
def test_1000_back_to_back_all_reduces(name, numel, rank, world_size, device):
    """Call i adds a value unique to (i, rank); results stay on the device until the end.

    A rank that reused its buffer before a peer finished reading would leave a wrong
    value somewhere in the 1000 results.
    """
    backend = cached_backend(name, _dev(name, device))
    n = 1000
    base = torch.arange(numel, dtype=torch.float32, device=backend.device)
    results = torch.empty(n, numel, dtype=torch.float32, device=backend.device)
    for i in range(n):
        t = base + float(i * world_size + rank)
        backend.all_reduce(t)
        results[i].copy_(t)
    ranks_sum = world_size * (world_size - 1) / 2
    iters = torch.arange(n, dtype=torch.float64).unsqueeze(1) * world_size * world_size
    want = (world_size * base.cpu().double() + iters + ranks_sum).float()
    wrong = (results.cpu() != want).any(dim=1).nonzero().flatten().tolist()
    assert not wrong, f"{len(wrong)} of {n} all-reduces wrong, first at call {wrong[0]}"


@pytest.mark.parametrize("name", BACKENDS)
def test_1000_back_to_back_broadcasts(name, rank, world_size, device):
    backend = cached_backend(name, _dev(name, device))
    n = 1000
    results = torch.empty(n, 64, device=backend.device)
    for i in range(n):
        root = i % world_size
        t = torch.full((64,), float(i if rank == root else -1), device=backend.device)
        backend.broadcast(t, root)
        results[i].copy_(t)
    want = torch.arange(n, dtype=torch.float32).unsqueeze(1).expand(n, 64)
    assert torch.equal(results.cpu(), want)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cycle(name, device, count):
    for _ in range(count):
        # timeout= gives each backend a group of its own, so destroy really releases one
        backend = create_backend(name, device=device, timeout=120)
        t = torch.ones(4096, device=backend.device)
        backend.all_reduce(t)
        backend.broadcast(t)
        backend.synchronize()
        backend.destroy()
    gc.collect()


def _device_bytes_of_this_process(device) -> int | None:
    """This process's memory on ``device`` as the driver counts it (NCCL's buffers too,
    which the caching allocator never sees); None where NVML cannot tell: no nvidia-ml-py,
    or a container whose process ids NVML does not share."""
    try:
        import pynvml
    except ImportError:
        return None
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByUUID(TorchCudaProbe().device_uuid(device.index))
    for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
        if process.pid == os.getpid():
            return process.usedGpuMemory
    return None


def _device_bytes_in_use(device) -> tuple[int, str]:
    """(bytes in use, whose): this process's own where NVML tells, else the whole
    device's, which counts every other process on the GPU (another xdist worker's ranks,
    an in-place run beside the pool)."""
    own = _device_bytes_of_this_process(device)
    if own is not None:
        return own, "this process's"
    free, total = torch.cuda.mem_get_info(device)
    return total - free, "the whole device's"


@pytest.mark.parametrize("name", BACKENDS)
def test_memory_stable_across_create_destroy(name, device):
    """After a warm-up, 20 more create/use/destroy cycles grow RSS < 64 MiB and GPU memory < 8 MiB."""
    dev = _dev(name, device)
    _cycle(name, dev, 5)
    rss0 = _rss_bytes()
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.synchronize(dev)
        alloc0 = torch.cuda.memory_allocated(dev)
        used0, whose = _device_bytes_in_use(dev)
    _cycle(name, dev, 20)
    rss_growth = _rss_bytes() - rss0
    assert rss_growth < 64 << 20, f"host RSS grew by {rss_growth / 2**20:.1f} MiB in 20 cycles"
    if cuda:
        torch.cuda.synchronize(dev)
        alloc_growth = torch.cuda.memory_allocated(dev) - alloc0
        used_growth = _device_bytes_in_use(dev)[0] - used0
        print(
            f"rss {rss_growth / 2**20:.1f} MiB, allocated {alloc_growth} B, "
            f"{whose} device memory {used_growth} B"
        )
        assert alloc_growth <= 0, f"caching allocator holds {alloc_growth} more bytes"
        assert used_growth < 8 << 20, (
            f"{whose} device memory in use grew by {used_growth / 2**20:.1f} MiB"
        )
