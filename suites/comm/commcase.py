"""Shared pieces of the comm suites: world/backend parameters, a per-rank backend cache
and the sweep's inputs, kept per rank.

Backends for the correctness sweeps are created once per rank process and reused by
later tests of the same pool (``cached_backend``): they run on the default process
group, which lives as long as the pool, and without the shape check, whose gloo
side group the harness destroys after every test. Tests of creation, destruction
and the checks themselves create their own backends.
"""

from __future__ import annotations

import pytest
import torch.distributed as dist

from rankgate.workloads.comm import create_backend
from rankgate.workloads.comm.reference import KeptDraws

GLOO_WORLDS = [
    pytest.param(2, marks=pytest.mark.world(2, backend="gloo"), id="gloo-w2"),
    pytest.param(4, marks=pytest.mark.world(4, backend="gloo"), id="gloo-w4"),
]
GPU_BACKENDS = [
    pytest.param("nccl", marks=pytest.mark.world(2, backend="nccl"), id="nccl-w2"),
    pytest.param("p2p", marks=pytest.mark.world(2, backend="nccl"), id="p2p-w2"),
]

_cache: dict[tuple, object] = {}

SWEEP_INPUTS = KeptDraws()
"""This rank's sweep inputs: each large draw is made once for every collective and dtype
of its size (the quick sweep's sizes stay below what it keeps)."""


def cached_backend(name: str, device):
    """This rank's backend ``name`` on the default group, created on first use."""
    key = (name, id(dist.group.WORLD), str(device))
    backend = _cache.get(key)
    if backend is None:
        backend = create_backend(name, device=device, check_shapes=False)
        _cache[key] = backend
    return backend
