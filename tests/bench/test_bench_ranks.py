"""Benchmark ranks (``rankgate.bench.ranks``): forked from a fork server with this process's
environment, or spawned where torch's import would not see it; they share the host's cores."""

from __future__ import annotations

import os

import pytest

from rankgate.bench.ranks import run_ranks

# launches: each test starts ranks of its own (run_ranks), as bench comm's tests do
pytestmark = [pytest.mark.dist, pytest.mark.launches]


def threads_of_rank(rank: int, world: int, opts, store_path) -> dict | None:
    import torch

    return {"threads": torch.get_num_threads()} if rank == 0 else None


def test_each_rank_gets_its_share_of_the_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    result = run_ranks(threads_of_rank, 2, None, name="threads")
    assert result == {"threads": max(1, cores // 2)}


def test_a_thread_count_the_user_set_is_kept(monkeypatch):
    # One rank would get every core; the user's OMP_NUM_THREADS=1 holds instead.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = run_ranks(threads_of_rank, 1, None, name="threads")
    assert result == {"threads": 1}


def where_rank_runs(rank: int, world: int, opts, store_path) -> dict | None:
    return {"parent": os.getppid(), "seen": {k: os.environ.get(k) for k in opts}}


def test_ranks_fork_from_a_server_and_see_this_processs_environment_of_the_moment(
    monkeypatch,
):
    run_ranks(where_rank_runs, 1, [], name="where")  # the server runs from here on
    monkeypatch.setenv("RANKGATE_BENCH_PROBE", "now")
    result = run_ranks(where_rank_runs, 1, ["RANKGATE_BENCH_PROBE"], name="where")
    assert result["seen"] == {"RANKGATE_BENCH_PROBE": "now"}
    assert result["parent"] != os.getpid()  # multiprocessing's fork server's child


def test_a_variable_read_at_import_that_the_server_lacks_spawns_the_ranks(monkeypatch):
    run_ranks(where_rank_runs, 1, [], name="where")  # the server runs, without it
    # torch's import would not see it in a rank forked from the server: spawned, it does.
    monkeypatch.setenv("TORCH_RANKGATE_BENCH_PROBE", "1")
    result = run_ranks(where_rank_runs, 1, ["TORCH_RANKGATE_BENCH_PROBE"], name="where")
    assert result == {"parent": os.getpid(), "seen": {"TORCH_RANKGATE_BENCH_PROBE": "1"}}
