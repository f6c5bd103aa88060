"""Error handling: shape mismatches, collectives that cannot complete, destroy twice."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from rankgate.workloads.comm import (
    BackendDestroyedError,
    CollectiveTimeoutError,
    ShapeMismatchError,
    create_backend,
)

GLOO = pytest.mark.world(2, backend="gloo")
BACKENDS = [
    pytest.param("gloo", marks=GLOO, id="gloo"),
    pytest.param("nccl", marks=pytest.mark.world(2, backend="nccl"), id="nccl"),
    pytest.param("p2p", marks=pytest.mark.world(2, backend="nccl"), id="p2p"),
]


def _device(name: str, device) -> torch.device:
    return torch.device("cpu") if name == "gloo" else device


def _mismatched(rank: int, device, what: str) -> torch.Tensor:
    if what == "shape":
        return torch.ones(3 + rank, device=device)
    if what == "dtype":
        return torch.ones(4, device=device, dtype=torch.float32 if rank == 0 else torch.bfloat16)
    if what == "layout":  # same shape, rank 1's is a transposed (non-contiguous) view
        t = torch.ones(4, 4, device=device)
        return t if rank == 0 else t.t()
    raise ValueError(what)


@pytest.mark.parametrize("what", ["shape", "dtype", "layout"])
@pytest.mark.parametrize("collective", ["all_reduce", "broadcast", "all_gather", "gather"])
@pytest.mark.parametrize("name", BACKENDS)
def test_mismatch_is_a_clear_error_on_every_rank(name, collective, what, rank, device):
    with create_backend(name, device=_device(name, device), timeout=60) as backend:
        t = _mismatched(rank, backend.device, what)
        with pytest.raises(ShapeMismatchError) as info:
            if collective == "all_gather":
                backend.all_gather(torch.empty(2 * t.numel(), dtype=t.dtype, device=t.device), t)
            else:
                getattr(backend, collective)(t)
        message = str(info.value)
        assert f"{name}.{collective}: tensors differ across ranks" in message
        assert "rank 0: shape" in message and "rank 1: shape" in message
        # the backend still works afterwards
        assert backend.all_reduce(torch.ones(2, device=backend.device)).tolist() == [2.0, 2.0]


@pytest.mark.parametrize("name", BACKENDS)
def test_reduce_scatter_mismatch(name, rank, device):
    with create_backend(name, device=_device(name, device), timeout=60) as backend:
        inp = torch.ones(4 + 2 * rank, device=backend.device)
        with pytest.raises(ShapeMismatchError, match="reduce_scatter: tensors differ"):
            backend.reduce_scatter(torch.empty(2 + rank, device=backend.device), inp)


@GLOO
def test_different_collectives_on_different_ranks(rank):
    with (
        create_backend("gloo", timeout=60) as backend,
        pytest.raises(ShapeMismatchError, match="ranks called different collectives"),
    ):
        if rank == 0:
            backend.all_reduce(torch.ones(2))
        else:
            backend.broadcast(torch.ones(2))


@GLOO
def test_wrong_output_size_is_refused_locally():
    with create_backend("gloo") as backend:
        with pytest.raises(ValueError, match=r"all_gather output must hold world_size \(2\) x"):
            backend.all_gather(torch.empty(3), torch.ones(2))
        with pytest.raises(ValueError, match=r"reduce_scatter input must hold world_size \(2\)"):
            backend.reduce_scatter(torch.empty(2), torch.ones(3))
        with pytest.raises(
            ValueError, match="unknown reduce op 'mean'; valid: sum, max, min, prod"
        ):
            backend.all_reduce(torch.ones(2), op="mean")
        with pytest.raises(ValueError, match=r"rank 5 is outside 0..1"):
            backend.send(torch.ones(1), 5)


def _release_after(rank: int, store, key: str) -> None:
    """Rank 1 waits until rank 0 has raised, so the test ends cleanly on both."""
    if rank == 0:
        store.set(key, "raised")
    else:
        store.wait([key], __import__("datetime").timedelta(seconds=60))


@pytest.mark.parametrize("check_shapes", [True, False], ids=["checked", "unchecked"])
@GLOO
def test_collective_a_peer_never_joins_times_out(rank, check_shapes):
    store = dist.distributed_c10d._get_default_store()
    key = f"comm-timeout-{check_shapes}"
    backend = create_backend("gloo", timeout=2.0, check_shapes=check_shapes)
    try:
        if rank == 0:
            start = time.monotonic()
            with pytest.raises(CollectiveTimeoutError, match=r"gloo\.all_reduce on rank 0"):
                backend.all_reduce(torch.ones(8))
            elapsed = time.monotonic() - start
            assert elapsed < 30, f"timeout of 2 s took {elapsed:.1f} s"
        _release_after(rank, store, key)
    finally:
        backend.destroy()
    if rank == 1:
        store.delete_key(key)


@pytest.mark.parametrize("name", ["nccl", "p2p"])
@pytest.mark.world(2, backend="nccl")
def test_gpu_queued_collective_a_peer_never_joins_times_out(name, rank, device):
    """synchronize(timeout) raises instead of hanging; the late peer then lets it finish."""
    store = dist.distributed_c10d._get_default_store()
    key = f"comm-gpu-timeout-{name}"
    with create_backend(name, device=device, check_shapes=False) as backend:
        t = torch.ones(1024, device=device)
        if rank == 0:
            backend.all_reduce(t)
            with pytest.raises(CollectiveTimeoutError, match="did not finish within 2"):
                backend.synchronize(timeout=2.0)
            store.set(key, "raised")
        else:
            store.wait([key], __import__("datetime").timedelta(seconds=60))
            backend.all_reduce(t)
        backend.synchronize(timeout=60)
        assert t.tolist() == [2.0] * 1024
        backend.barrier()
    if rank == 1:
        store.delete_key(key)


@pytest.mark.parametrize("name", BACKENDS)
def test_destroy_twice_and_use_after_destroy(name, device):
    backend = create_backend(name, device=_device(name, device), timeout=30)
    # Every rank's group connected before either closes it: Gloo's constructor can return
    # on one rank while its peer still reads the handshake, which then fails with
    # "Connection closed by peer" (the quick gate, under load, at 35b1f7c).
    backend.barrier()
    backend.destroy()
    backend.destroy()
    with pytest.raises(BackendDestroyedError, match="was destroyed; create a new one"):
        backend.all_reduce(torch.ones(1, device=backend.device))
    with pytest.raises(BackendDestroyedError):
        backend.barrier()
    assert "destroyed" in repr(backend)
