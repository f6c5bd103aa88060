"""Shared pieces of the parallelism suites: world parameters and seeded global inputs.

Every parity test builds the *global* inputs from a fixed seed on every rank, computes
the degree-1 baseline from them in the same process, derives its own shard, and
compares (rankgate.parity) what the degree-N run produced with the baseline's shard.
"""

from __future__ import annotations

import pytest
import torch

CPU_WORLDS = [
    pytest.param(n, marks=pytest.mark.world(n, backend="gloo"), id=f"gloo-w{n}") for n in (1, 2, 4)
]
CPU_MULTI = CPU_WORLDS[1:]
GPU_WORLDS = [
    pytest.param(n, marks=[pytest.mark.world(n, backend="nccl"), pytest.mark.gpu], id=f"nccl-w{n}")
    for n in (2, 4)
]


def seeded(*shape: int, seed: int, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """The same random tensor on every rank (CPU generator, then moved)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)


def qkv(b: int, h: int, hk: int, s: int, d: int, *, seed: int, dtype, device):
    """Global q (b, h, s, d), k and v (b, hk, s, d), and an output gradient like q."""
    return [seeded(b, n, s, d, seed=seed + i, dtype=dtype, device=device)
            for i, n in enumerate((h, hk, hk, h))]  # fmt: skip
