"""Which GPUs a pytest process may hand to its pools.

Under pytest-xdist each worker gets a disjoint slice of the visible GPUs, so two
workers never put ranks on the same device.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def visible_gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def xdist_slot(env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(index, count) of this xdist worker; (0, 1) outside xdist."""
    env = os.environ if env is None else env
    worker = env.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return 0, 1
    return int(worker[2:]), max(1, int(env.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def gpu_share(total: int, slot: int, slots: int) -> tuple[int, ...]:
    """The GPU indices worker ``slot`` of ``slots`` owns out of ``total`` (contiguous block)."""
    per_slot = total // slots
    return tuple(range(slot * per_slot, (slot + 1) * per_slot))
