"""World tests that use only CPU tensors: the same file passes on a CPU laptop and on
GPU ranks (where backend="auto" gives a group that serves CPU tensors through gloo
and CUDA tensors through NCCL), in the pool and in place under any launcher.

World 4 runs on CPU ranks (gloo) wherever the machine has fewer than 4 GPUs.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

WORLDS = [pytest.param(n, marks=pytest.mark.world(n), id=f"world{n}") for n in (2, 4)]
CPU = torch.device("cpu")


@pytest.mark.parametrize("n", WORLDS)
def test_all_reduce(n, rank, world_size):
    t = torch.full((1000,), float(rank + 1), device=CPU)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((1000,), world_size * (world_size + 1) / 2))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert t[0].item() == world_size * (world_size + 1) / 2


@pytest.mark.parametrize("n", WORLDS)
def test_all_gather(n, rank, world_size):
    parts = [torch.empty(3, dtype=torch.int64) for _ in range(world_size)]
    dist.all_gather(parts, torch.arange(3) + 10 * rank)
    assert [p.tolist() for p in parts] == [
        [10 * r, 10 * r + 1, 10 * r + 2] for r in range(world_size)
    ]


@pytest.mark.parametrize("n", WORLDS)
def test_broadcast_from_the_last_rank(n, rank, world_size):
    t = torch.tensor([rank, rank * 2], dtype=torch.float64)
    dist.broadcast(t, src=world_size - 1)
    assert t.tolist() == [world_size - 1, 2 * (world_size - 1)]


@pytest.mark.parametrize("n", WORLDS)
def test_barrier_orders_a_file_handoff(n, rank, world_size, dist_tmp_path):
    (dist_tmp_path / f"rank{rank}").write_text(str(rank))
    dist.barrier()
    assert sorted(p.name for p in dist_tmp_path.iterdir()) == [
        f"rank{r}" for r in range(world_size)
    ]


@pytest.mark.parametrize("n", WORLDS)
def test_send_recv_around_a_ring(n, rank, world_size):
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    got = torch.empty(2)
    ops = [
        dist.P2POp(dist.isend, torch.tensor([float(rank), 1.0]), right),
        dist.P2POp(dist.irecv, got, left),
    ]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    assert got.tolist() == [float(left), 1.0]
    if rank == 0:
        dist.send(torch.tensor([42.0]), dst=world_size - 1)
    elif rank == world_size - 1:
        t = torch.empty(1)
        dist.recv(t, src=0)
        assert t.item() == 42.0


@pytest.mark.parametrize("n", WORLDS)
def test_object_collectives(n, rank, world_size):
    gathered = [None] * world_size
    dist.all_gather_object(gathered, {"rank": rank, "name": f"r{rank}"})
    assert gathered == [{"rank": r, "name": f"r{r}"} for r in range(world_size)]
    objects = [("config", 3) if rank == 0 else None]
    dist.broadcast_object_list(objects, src=0)
    assert objects == [("config", 3)]


@pytest.mark.parametrize("n", WORLDS)
def test_subgroup_of_even_ranks(n, rank, world_size):
    evens = list(range(0, world_size, 2))
    group = dist.new_group(evens)  # every rank takes part in creating it
    if rank in evens:
        t = torch.ones(1)
        dist.all_reduce(t, group=group)
        assert t.item() == len(evens)
        assert dist.get_world_size(group) == len(evens)


@pytest.mark.world(2)
def test_a_group_outlives_the_test_until_every_rank_has_finished(rank, dist_tmp_path):
    """The harness destroys the groups a test made only once every rank has finished the
    test: a rank that destroyed them at once could close its sockets while a slower peer
    was still connecting (gloo's "connectFullMesh failed ... Connection closed by peer",
    seen under load). Rank 1 ends at once and watches its group; rank 0 ends 1 s later."""
    import contextlib
    import threading
    import time

    from torch.distributed.distributed_c10d import _world

    group = dist.new_group([0, 1])
    gone = dist_tmp_path / "rank1-group-destroyed"
    if rank == 1:

        def watch() -> None:
            start = time.monotonic()
            while group in _world.pg_map and time.monotonic() < start + 10:
                time.sleep(0.01)
            with contextlib.suppress(OSError):  # the run may have ended and taken the folder
                gone.write_text(f"{time.monotonic() - start:.2f}")

        threading.Thread(target=watch, daemon=True).start()
        return
    time.sleep(1.0)
    assert not gone.exists(), f"rank 1 destroyed the group {gone.read_text()} s into its wait"


@pytest.mark.parametrize("n", WORLDS)
@pytest.mark.parametrize("turn", ["first", "again"])
def test_mesh_on_a_group_of_its_own(turn, n, rank, world_size):
    """A DeviceMesh over a group made for it, as init_device_mesh makes on a GPU host
    whose default group is gloo. The harness destroys that group after the test; the
    second turn's mesh is equal to the first's, and DTensor must not hand back the
    first one from its caches (its group is gone)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard

    mesh = DeviceMesh.from_group(dist.new_group(list(range(world_size))), "cpu")
    local = torch.full((2,), float(rank))
    full = DTensor.from_local(local, mesh, [Shard(0)]).detach().full_tensor()
    assert full.tolist() == [float(r) for r in range(world_size) for _ in range(2)]


GLOO_WORLDS = [
    pytest.param(n, marks=pytest.mark.world(n, backend="gloo"), id=f"world{n}") for n in (1, 2)
]


@pytest.mark.parametrize("n", GLOO_WORLDS)
def test_gloo_requested_runs_on_cpu_everywhere(n, rank, world_size, device):
    # In place on GPU ranks the session's group is cpu:gloo,cuda:nccl; a gloo test's body
    # still sees a gloo group, as in a gloo pool.
    assert device == CPU and dist.get_backend() == "gloo"
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    assert t.item() == world_size * (world_size - 1) / 2


@pytest.mark.world(2)
def test_auto_group_takes_cpu_and_cuda_tensors(rank, device):
    cpu = torch.tensor([rank + 1.0])
    dist.all_reduce(cpu)
    assert cpu.item() == 3.0
    if device.type == "cuda":  # auto on GPUs: the same group, the CUDA tensor through NCCL
        assert torch.cuda.current_device() == device.index
        on_gpu = torch.tensor([rank + 1.0], device=device)
        dist.all_reduce(on_gpu)
        assert on_gpu.item() == 3.0
