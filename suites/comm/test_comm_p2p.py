"""The p2p backend on two GPUs: each path it takes, its fallbacks, and CUDA graphs."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from rankgate.workloads.comm import P2PConfig, create_backend
from rankgate.workloads.comm.reference import (
    check,
    expected,
    rank_input,
    rank_order_sum,
    run_collective,
    spread_normal,
)

pytestmark = pytest.mark.world(2, backend="nccl")

SMALL_BUFFER = P2PConfig(
    buffer_bytes=1 << 20, push_max_bytes=4 << 10, oneshot_max_bytes=64 << 10,
    broadcast_max_bytes=1 << 20,
)  # fmt: skip
WITH_BROADCAST = P2PConfig(broadcast_max_bytes=1 << 20)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("algorithm", ["push", "oneshot", "twoshot"])
def test_forced_algorithm_is_exact_at_every_size(algorithm, dtype, device):
    """Sizes from one element to the path's limit (half the buffer; the push slot), odd counts included."""
    cfg = P2PConfig(buffer_bytes=8 << 20, push_max_bytes=256 << 10, algorithm=algorithm)
    limit = cfg.push_slot_bytes if algorithm == "push" else cfg.buffer_bytes // 2
    with create_backend("p2p", device=device, p2p_config=cfg, check_shapes=False) as backend:
        sizes = [1, 2, 3, 7, 8, 9, 1023, 4096, 4100, 65537, limit // dtype.itemsize]
        for numel in [
            n for n in sizes if (n * dtype.itemsize) % 4 == 0 and n * dtype.itemsize <= limit
        ]:
            t = torch.empty(numel, dtype=dtype, device=device)
            assert backend.all_reduce_path(t)[0] == algorithm
            inputs = [rank_input(r, numel, dtype, seed=numel) for r in range(2)]
            got = run_collective(backend, "all_reduce", inputs)
            check(got, expected("all_reduce", inputs, backend.rank), what=f"{algorithm} {numel}")
        assert not backend.fallbacks


def test_routes_by_size_and_falls_back_with_reasons(device):
    with create_backend("p2p", device=device, p2p_config=SMALL_BUFFER) as backend:

        def path(t, op="sum"):
            return backend.all_reduce_path(t, op)

        f32 = torch.float32
        assert path(torch.empty(1 << 10, device=device)) == ("push", "")  # 4 KiB
        assert path(torch.empty((1 << 10) + 4, device=device)) == ("oneshot", "")
        assert path(torch.empty(16 << 10, device=device))[0] == "oneshot"  # 64 KiB
        assert path(torch.empty((16 << 10) + 1, device=device))[0] == "twoshot"
        assert path(torch.empty(1 << 17, device=device)) == ("twoshot", "")  # 512 KiB
        assert path(torch.empty((1 << 17) + 1, device=device)) == (
            "nccl",
            "payload over 524288 bytes",
        )
        bf16, f16 = torch.bfloat16, torch.float16
        assert path(torch.empty(3, device=device, dtype=bf16)) == (
            "nccl",
            "size not a multiple of 4 bytes",
        )
        assert path(torch.empty(8, device=device, dtype=f16)) == ("nccl", "dtype torch.float16")
        assert path(torch.empty(1 << 16, device=device, dtype=bf16))[0] == "twoshot"
        assert path(torch.empty(8, device=device, dtype=torch.int32)) == (
            "nccl",
            "dtype torch.int32",
        )
        assert path(torch.empty(8, device=device), "max") == ("nccl", "reduce op max")
        assert path(torch.empty(4, 4, device=device).t()) == ("nccl", "non-contiguous tensor")
        assert path(torch.empty(8, dtype=f32)) == ("nccl", f"tensor on cpu, backend on {device}")
        # the fallbacks give right answers and are counted once per reason
        x = torch.ones(8, device=device, dtype=torch.int32)
        backend.all_reduce(x)
        backend.all_reduce(x)
        assert x.tolist() == [4] * 8
        y = torch.ones(4, 4, device=device).t()
        backend.all_reduce(y)
        assert torch.equal(y, torch.full((4, 4), 2.0, device=device).t())
        assert backend.fallbacks == {
            "all_reduce: dtype torch.int32": 2,
            "all_reduce: non-contiguous tensor": 1,
        }
        big = torch.ones((1 << 20) // 2, device=device)  # 2 MiB broadcast: over the limit
        backend.broadcast(big, 1)
        assert backend.fallbacks["broadcast: payload over 524288 bytes"] == 1


@pytest.mark.parametrize("root", [0, 1])
def test_broadcast_any_dtype_through_peer_memory(root, device):
    with create_backend("p2p", device=device, p2p_config=WITH_BROADCAST) as backend:
        for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.uint8):
            inputs = [rank_input(r, 4099, dtype, seed=9) for r in range(2)]
            got = run_collective(backend, "broadcast", inputs, root=root)
            check(got, inputs[root], what=f"broadcast {dtype} from {root}")
        assert not backend.fallbacks


@pytest.mark.parametrize("numel", [1024, 128 << 10, 1 << 20])  # fp32: push, one-shot, two-shot
def test_captured_in_a_cuda_graph(numel, rank, device):
    """Captured once (the shape check runs at capture), replayed with new inputs."""
    with create_backend("p2p", device=device, p2p_config=WITH_BROADCAST) as backend:
        static = torch.zeros(numel, device=device)
        bcast = torch.zeros(256, device=device)
        warm = torch.cuda.Stream(device)
        warm.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(warm):
            backend.all_reduce(static)
            backend.broadcast(bcast, 0)
        torch.cuda.current_stream(device).wait_stream(warm)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(3):
                backend.all_reduce(static)
            backend.broadcast(bcast, 0)
        for step in range(5):
            static.fill_(float(rank + step))
            bcast.fill_(float(step if rank == 0 else -1))
            graph.replay()
            torch.cuda.synchronize(device)
            # three all-reduces of (rank + step): 4 * (1 + 2 * step)
            assert torch.all(static == 4 * (1 + 2 * step)), (step, static[:4].tolist())
            assert torch.all(bcast == step)
        assert not backend.fallbacks


def test_misaligned_tensor_takes_the_same_kernel(rank, device):
    """A view one element in on rank 1 only: results land via the buffer's upper half."""
    with create_backend("p2p", device=device) as backend:
        for numel in (1024, 32 << 10, 1 << 20):  # eager: one-shot, one-shot, two-shot
            base = torch.zeros(numel + 1, device=device)
            t = base[1:] if rank == 1 else base[:numel]
            t.copy_(torch.arange(numel, device=device, dtype=torch.float32) + rank)
            backend.all_reduce(t)
            want = 2 * torch.arange(numel, device=device, dtype=torch.float32) + 1
            assert torch.equal(t, want), numel
        assert not backend.fallbacks


def test_broadcast_goes_to_nccl_by_default(device):
    with create_backend("p2p", device=device) as backend:
        backend.broadcast(torch.ones(8, device=device), 0)
        assert backend.fallbacks == {"broadcast: broadcast_max_bytes is 0": 1}


def test_push_survives_many_graph_replays_and_backend_rebuilds(rank, device):
    """Epochs and flags live on the GPU: graph replays advance them, a new backend resets them."""
    eager_push = P2PConfig(push_max_bytes=8 << 10)  # eager calls push too, from a smaller slot
    for rebuild in range(3):
        with create_backend("p2p", device=device, p2p_config=eager_push) as backend:
            assert backend.push_problem is None
            t = torch.zeros(1024, device=device)
            assert backend.all_reduce_path(t)[0] == "push"
            backend.all_reduce(t)  # eager epochs before the graph's
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                backend.all_reduce(t)
            for step in range(200):
                t.fill_(float(rank + step + rebuild))
                graph.replay()
                if step % 50 == 49:
                    torch.cuda.synchronize(device)
                    assert torch.all(t == 2 * (step + rebuild) + 1), (rebuild, step)
            assert not backend.fallbacks


def test_push_sizes_mixed_in_one_graph_stay_exact(rank, device):
    """Back-to-back pushes of different block counts and odd sizes, replayed without syncs.

    Each block owns fixed bytes of the slots, so a large call cannot overwrite what a
    peer's block still reads from a smaller one (and the other way round). Every
    replay's results are kept (stream-ordered copies) and checked at the end.
    """
    sizes = [3072, 4096, 1025, 25603, 2048, 3]  # fp32 elements: 12, 16, ~4, ~100, 8 KiB, 12 B
    steps = 50
    with create_backend("p2p", device=device) as backend:
        ramps = [torch.arange(n, device=device, dtype=torch.float32) for n in sizes]
        tensors = [torch.zeros(n, device=device) for n in sizes]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for t in tensors:
                assert backend.all_reduce_path(t)[0] == "push"
                backend.all_reduce(t)
        kept = []
        for step in range(steps):
            for i, (t, ramp) in enumerate(zip(tensors, ramps)):
                torch.add(ramp * (rank + 1), i + step, out=t)
            graph.replay()
            kept.append([t.clone() for t in tensors])
        torch.cuda.synchronize(device)
        for step, results in enumerate(kept):  # ranks 0 and 1: 3 * ramp + 2 * (i + step)
            for i, (got, ramp) in enumerate(zip(results, ramps)):
                assert torch.equal(got, ramp * 3 + 2 * (i + step)), (step, sizes[i])
        assert not backend.fallbacks


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits on the host (so -0.0 and 0.0, or two NaNs, are told apart)."""
    return t.detach().cpu().contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


# bytes: one word, 257 words, 2049 words (two blocks and a tail), 13 blocks, the largest slot
PUSH_FLOAT_BYTES = (4, 1028, 8196, 100004, 256 << 10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_push_rounds_random_floats_like_the_reference_on_every_rank(dtype, rank, device):
    """Random floats whose sums round (``spread_normal``), eagerly and replayed in a graph.

    Every rank must hold ``rank_order_sum``'s bits (float32 additions in rank order, one
    rounding to nearest even) and the same bits as every other rank (gathered over NCCL).
    """
    cfg = P2PConfig(push_max_bytes=256 << 10, algorithm="push")
    with create_backend("p2p", device=device, p2p_config=cfg, check_shapes=False) as backend:
        world = backend.world_size

        def inputs(numel, step):
            return [
                spread_normal(numel, dtype, seed=(numel * 31 + step) * 8 + r) for r in range(world)
            ]

        def check_bits(got, want, what):
            assert torch.equal(_bits(got), _bits(want)), f"{what}: not the reference's bits"
            every = [torch.empty_like(got) for _ in range(world)]
            dist.all_gather(every, got)
            for r in range(1, world):
                assert torch.equal(_bits(every[r]), _bits(every[0])), f"{what}: rank {r} differs"

        numels = [n // dtype.itemsize for n in PUSH_FLOAT_BYTES]
        for numel in numels:  # eager
            ins = inputs(numel, 0)
            t = ins[rank].to(device)
            assert backend.all_reduce_path(t)[0] == "push"
            backend.all_reduce(t)
            check_bits(t, rank_order_sum(ins), f"eager {numel}")
        statics = [torch.zeros(n, dtype=dtype, device=device) for n in numels]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for t in statics:
                backend.all_reduce(t)
        for step in (1, 2):
            per_size = [inputs(n, step) for n in numels]
            for t, ins in zip(statics, per_size):
                t.copy_(ins[rank])
            graph.replay()
            torch.cuda.synchronize(device)
            for t, ins, n in zip(statics, per_size, numels):
                check_bits(t, rank_order_sum(ins), f"graph step {step}, {n}")
        assert not backend.fallbacks
