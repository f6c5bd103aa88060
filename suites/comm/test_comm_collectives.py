"""Every collective x dtype x size against a host reference, on gloo (2 and 4 ranks) and GPUs.

Inputs are random integers in [-8, 8] (see rankgate.workloads.comm.reference), so every
result is exact and compared bit for bit whatever order a backend reduces in;
test_random_normal_sums covers rounding with normal data. Sizes run from one element
to 64 MiB per rank; sizes from 4 MiB up are ``slow`` on gloo (2 CPU cores) and run in
full on GPUs.
"""

from __future__ import annotations

import pytest
import torch
from commcase import GLOO_WORLDS, GPU_BACKENDS, SWEEP_INPUTS, cached_backend

from rankgate.workloads.comm.reference import (
    COLLECTIVES,
    DTYPES,
    check,
    expected,
    rank_input,
    run_collective,
    sum_tolerance,
)

# Elements per rank: one, odd, not a multiple of any vector width, 256 KiB of fp32.
SMALL = [1, 3, 1027, 65537]
BIG_BYTES = [4 << 20, 64 << 20]


def _numel(size, dtype: torch.dtype) -> int:
    return size[1] // dtype.itemsize if isinstance(size, tuple) else size


def _sizes(slow_big: bool):
    small = [pytest.param(n, id=f"n{n}") for n in SMALL]
    marks = [pytest.mark.slow] if slow_big else []
    big = [pytest.param(("bytes", b), marks=marks, id=f"{b >> 20}MiB") for b in BIG_BYTES]
    return small + big


def _run_and_check(backend, collective, dtype_name, size, seed, root=0):
    dtype = DTYPES[dtype_name]
    world, rank = backend.world_size, backend.rank
    numel = _numel(size, dtype)
    if collective == "reduce_scatter":
        numel = max(numel // world, 1) * world
    # Only the inputs this rank's result depends on: a 64 MiB one takes a second to make
    # on 2 cores, and broadcast, send_recv and gather off the root need two, not world.
    needed = {
        "broadcast": {rank, root},
        "send_recv": {rank, (rank - 1) % world},
        "gather": set(range(world)) if rank == root else {rank},
    }.get(collective, set(range(world)))
    inputs = [
        SWEEP_INPUTS.rank_input(r, numel, dtype, seed=seed) if r in needed else None
        for r in range(world)
    ]
    got = run_collective(backend, collective, inputs, root=root)
    want = expected(collective, inputs, rank, root=root)
    what = f"{backend.name} {collective} {dtype_name} numel={numel} rank {rank}/{world}"
    if collective == "gather":
        assert (got is None) == (want is None), f"{what}: gather result on the wrong ranks"
        for r, (g, w) in enumerate(zip(got or [], want or [])):
            check(g, w, what=f"{what} (from rank {r})")
        return
    check(got, want, what=what)


@pytest.mark.parametrize("size", _sizes(slow_big=True))
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("world", GLOO_WORLDS)
def test_gloo_collective(world, collective, dtype_name, size, device):
    backend = cached_backend("gloo", device)
    _run_and_check(backend, collective, dtype_name, size, seed=world * 7919 + len(str(size)))


@pytest.mark.parametrize("size", _sizes(slow_big=False))
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("backend_name", GPU_BACKENDS)
def test_gpu_collective(backend_name, collective, dtype_name, size, device):
    backend = cached_backend(backend_name, device)
    _run_and_check(backend, collective, dtype_name, size, seed=31 + len(str(size)))


@pytest.mark.parametrize("root", [0, 1])
@pytest.mark.parametrize("world", GLOO_WORLDS)
def test_broadcast_and_gather_from_every_root(world, root, device):
    backend = cached_backend("gloo", device)
    for collective in ("broadcast", "gather"):
        _run_and_check(backend, collective, "fp32", 1027, seed=5, root=root)


def _normal_sum_case(backend, dtype_name, numel=4099):
    dtype = DTYPES[dtype_name]
    inputs = [
        rank_input(r, numel, dtype, seed=11, kind="normal") for r in range(backend.world_size)
    ]
    got = run_collective(backend, "all_reduce", inputs)
    want = expected("all_reduce", inputs, backend.rank)
    what = f"{backend.name} all_reduce normal {dtype_name} rank {backend.rank}/{backend.world_size}"
    if backend.world_size == 2 or not dtype.is_floating_point:
        check(got, want, what=what)  # one rounding (or integers): bit-exact
    else:
        check(got, want, sum_tolerance(inputs), what=what)


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("world", GLOO_WORLDS)
def test_random_normal_sums(world, dtype_name, device):
    """Bit-exact at world 2 (a single correctly rounded addition); n*eps*sum|x| beyond."""
    _normal_sum_case(cached_backend("gloo", device), dtype_name)


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("backend_name", GPU_BACKENDS)
def test_gpu_random_normal_sums(backend_name, dtype_name, device):
    _normal_sum_case(cached_backend(backend_name, device), dtype_name)


@pytest.mark.parametrize("op", ["max", "min", "prod"])
@pytest.mark.world(2, backend="gloo")
def test_other_reduce_ops(op, device):
    backend = cached_backend("gloo", device)
    inputs = [rank_input(r, 257, torch.float32, seed=3) for r in range(2)]
    got = backend.all_reduce(inputs[backend.rank].clone(), op=op)
    fn = {"max": torch.maximum, "min": torch.minimum, "prod": torch.mul}[op]
    check(got, fn(inputs[0], inputs[1]), what=f"all_reduce {op}")


@pytest.mark.world(2, backend="gloo")
def test_barrier_waits_for_every_rank(rank, device):
    import time

    import torch.distributed as dist

    backend = cached_backend("gloo", device)
    store = dist.distributed_c10d._get_default_store()
    key = f"comm-barrier-{time.time_ns() if rank == 1 else 0}"
    if rank == 1:
        time.sleep(0.2)
        store.set("comm-barrier-late", key)
    backend.barrier()
    if rank == 0:
        # rank 1 wrote the key before entering the barrier, so it must be there now
        assert store.check(["comm-barrier-late"]), "barrier returned before rank 1 arrived"
    backend.barrier()
    if rank == 1:
        store.delete_key("comm-barrier-late")


def _ring_exchange(backend, numel=4099):
    world, rank = backend.world_size, backend.rank
    inputs = [rank_input(r, numel, torch.bfloat16, seed=17) for r in range(world)]
    got = torch.empty(numel, dtype=torch.bfloat16, device=backend.device)
    mine = inputs[rank].to(backend.device)
    backend.send_recv(mine, (rank + 1) % world, got, (rank - 1) % world)
    check(got, expected("send_recv", inputs, rank), what=f"{backend.name} send_recv")


@pytest.mark.parametrize("world", GLOO_WORLDS)
def test_simultaneous_send_recv_ring(world, device):
    _ring_exchange(cached_backend("gloo", device))


@pytest.mark.parametrize("backend_name", GPU_BACKENDS)
def test_gpu_simultaneous_send_recv_ring(backend_name, device):
    _ring_exchange(cached_backend(backend_name, device))
