"""Which GPUs a pytest process hands to its pools.

Every pytest process sees every visible GPU; a world test on NCCL leases its GPUs for
its set-up and body (rankgate.harness.pool.gpulease), so xdist workers share the machine's
GPUs without ever running two tests on one GPU at once, and a world(n) test is never
skipped while the machine has n GPUs. Each worker prefers its own block of GPUs, so
tests of different workers run side by side where there are GPUs enough.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

GPU_DRIVER_NODES = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")
"""What a GPU driver torch.cuda can use puts on a machine (NVIDIA, ROCm, WSL): without any
of them torch sees no GPU, and a pytest process need not import torch (a second or more
of CPU) to learn that."""


def gpu_driver_present() -> bool:
    """Whether any of :data:`GPU_DRIVER_NODES` exists (without it, no torch import)."""
    return any(os.path.exists(node) for node in GPU_DRIVER_NODES)


def visible_gpu_count() -> int:
    if not gpu_driver_present():
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def xdist_slot(env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(index, count) of this xdist worker; (0, 1) outside xdist."""
    env = os.environ if env is None else env
    worker = env.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return 0, 1
    return int(worker[2:]), max(1, int(env.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def gpu_block(total: int, world: int, slot: int, workers: int = 1) -> tuple[int, ...]:
    """The ``world`` GPU indices (of ``total``) worker ``slot`` of ``workers`` puts a
    world's ranks on.

    Each worker owns a region of ``total // workers`` GPUs and puts a world that fits
    there inside it, so on 4 GPUs two workers' world(1) and world(2) pools sit on (0, 1)
    and (2, 3) and run side by side. A larger world takes consecutive blocks, wrapping
    around: on 2 GPUs both workers' world(2) sit on (0, 1) and take turns through the
    lease.
    """
    if world > total:
        return ()
    region = max(1, total // max(1, workers))
    start = (slot * region) % total if world <= region else (slot * world) % total
    return tuple((start + i) % total for i in range(world))
