"""Spawned benchmark ranks share the host's cores (``rankgate.bench.ranks``)."""

from __future__ import annotations

import os

import pytest

from rankgate.bench.ranks import run_ranks

pytestmark = pytest.mark.dist  # spawns ranks


def threads_of_rank(rank: int, world: int, opts, store_path) -> dict | None:
    import torch

    return {"threads": torch.get_num_threads()} if rank == 0 else None


def test_each_spawned_rank_gets_its_share_of_the_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    result = run_ranks(threads_of_rank, 2, None, name="threads")
    assert result == {"threads": max(1, cores // 2)}


def test_a_thread_count_the_user_set_is_kept(monkeypatch):
    # One rank would get every core; the user's OMP_NUM_THREADS=1 holds instead.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = run_ranks(threads_of_rank, 1, None, name="threads")
    assert result == {"threads": 1}
