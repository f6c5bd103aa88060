"""The harness on GPUs: NCCL pools, the device fixture and per-test CUDA resets.

Collected everywhere, skipped (with the GPU count) where there are too few GPUs.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.distributed as dist
from jobs import run_torchrun_pytest

# World 4 and 8 skip, naming the GPUs they need, where fewer are visible.
NCCL_WORLDS = [
    pytest.param(n, marks=pytest.mark.world(n, backend="nccl"), id=f"world{n}") for n in (2, 4, 8)
]


@pytest.mark.world(1, backend="nccl")
def test_single_gpu_rank(rank, device):
    # cuda:0 in the pool; in place, the GPU of the rank whose sub-world of one runs it
    assert device == torch.device("cuda", torch.cuda.current_device())
    assert "cuda:nccl" in dist.get_backend_config()  # in place the group also serves CPU tensors
    t = torch.ones(4, device=device)
    dist.all_reduce(t)
    assert t.sum().item() == 4


@pytest.mark.parametrize("n", NCCL_WORLDS)
def test_nccl_all_reduce_on_each_rank_gpu(n, rank, world_size, device):
    # Each rank its own GPU: cuda:<rank> in the pool; in place the launched rank's (a
    # sub-world of ranks 2, 3 at N=4 has cuda:2, cuda:3 as its ranks 0, 1).
    assert device == torch.device("cuda", torch.cuda.current_device())
    indices = [None] * world_size
    dist.all_gather_object(indices, device.index)
    assert len(set(indices)) == world_size, indices
    t = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(t)
    assert torch.all(t == sum(range(1, world_size + 1))).item()


@pytest.mark.world(2, backend="nccl")
def test_peak_memory_is_reset_between_tests_part_1(device):
    big = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    assert torch.cuda.max_memory_allocated(device) >= 256 << 20
    del big


@pytest.mark.world(2, backend="nccl")
def test_peak_memory_is_reset_between_tests_part_2(device):
    assert torch.cuda.max_memory_allocated(device) < 256 << 20


@pytest.mark.parametrize("n", NCCL_WORLDS)
def test_nccl_all_gather_and_send_recv_ring(n, rank, world_size, device):
    parts = [torch.empty(2, device=device) for _ in range(world_size)]
    dist.all_gather(parts, torch.full((2,), float(rank), device=device))
    assert [p[0].item() for p in parts] == [float(r) for r in range(world_size)]
    got = torch.empty(1, device=device)
    ops = [
        dist.P2POp(dist.isend, torch.tensor([float(rank)], device=device), (rank + 1) % world_size),
        dist.P2POp(dist.irecv, got, (rank - 1) % world_size),
    ]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    assert got.item() == float((rank - 1) % world_size)


@pytest.mark.world(2, backend="nccl", timeout=30)
def test_next_after_gpu_tests_is_healthy(rank, device):
    t = torch.tensor([rank], device=device)
    dist.broadcast(t, src=1)
    assert t.item() == 1


def _enough_gpus(n: int):
    """Skip unless the harness's auto rule puts world(n) on GPUs here."""
    from rankgate.harness.pool.gpus import visible_gpu_count
    from rankgate.harness.spec import resolve_backend, uses_gpus

    count = visible_gpu_count()
    reason = f"auto puts ranks on GPUs only with {n} GPUs; {count} visible"
    return pytest.mark.skipif(not uses_gpus(resolve_backend("auto", n, count)), reason=reason)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "n",
    [
        pytest.param(n, marks=[pytest.mark.world(n), _enough_gpus(n)], id=f"world{n}")
        for n in (2, 4, 8)
    ],
)
def test_auto_on_gpus_keeps_device_on_this_rank_gpu(n, rank, device):
    assert device.type == "cuda" and torch.cuda.current_device() == device.index
    assert "nccl" in dist.get_backend() and "gloo" in dist.get_backend()


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
)
def test_xdist_workers_get_disjoint_gpus(inner):
    seen = inner.env_seen_per_xdist_worker("world(1, backend='nccl')", "CUDA_VISIBLE_DEVICES")
    assert sorted(seen) == ["gw0", "gw1"]
    assert seen["gw0"].isdisjoint(seen["gw1"]), seen


TAKE_TURNS = """
import os
import time
import pytest
import torch
import torch.distributed as dist

@pytest.fixture
def spans(tmp_path_factory):
    out = tmp_path_factory.getbasetemp().parent / "spans"
    out.mkdir(exist_ok=True)
    return out

@pytest.mark.world(2, backend="nccl")
@pytest.mark.parametrize("i", range(4))
def test_turn(i, rank, device, spans):
    start = time.time()
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    time.sleep(0.3)
    assert t.item() == 2
    name = f"{os.environ['PYTEST_XDIST_WORKER']}-{i}-{rank}"
    gpu = torch.cuda.get_device_properties(device).uuid  # the physical GPU, whatever its index
    (spans / name).write_text(f"{start} {time.time()} {gpu}")
"""


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
)
def test_xdist_workers_never_use_one_gpu_at_once(inner):
    """-n 2: every world(2) test runs (none skipped for "its share"), and two tests that
    share a GPU never overlap. On two GPUs the workers take turns with the same pair; on
    four they may run side by side on disjoint pairs."""
    base = inner.pytester.path / "bt"
    result = inner(TAKE_TURNS, "-n", "2", "--basetemp", str(base), subprocess=True)
    result.assert_outcomes(passed=4)
    spans = {}
    for f in (base / "spans").iterdir():
        worker, i, _rank = f.name.split("-")
        start, end, gpu = f.read_text().split()
        spans.setdefault((worker, i), []).append((float(start), float(end), {gpu}))
    assert len(spans) == 4 and {w for w, _ in spans} == {"gw0", "gw1"}, spans
    tests = {
        name: (min(s for s, _, _ in v), max(e for _, e, _ in v), set().union(*(g for *_, g in v)))
        for name, v in spans.items()
    }
    for (a, (a0, a1, a_gpus)), (b, (b0, b1, b_gpus)) in itertools.combinations(tests.items(), 2):
        if a_gpus & b_gpus:
            assert a1 <= b0 or b1 <= a0, f"{a} and {b} overlapped on GPUs {a_gpus & b_gpus}"


GLOO_BESIDE_NCCL = """
import pytest
import torch
import torch.distributed as dist

from rankgate.workloads.comm import create_backend

N = {n}

@pytest.mark.world(N, backend="gloo")
def test_a_gloo_body_sees_gloo(rank, device):
    assert dist.get_backend() == "gloo" and device == torch.device("cpu")
    with create_backend("auto") as backend:
        assert backend.name == "gloo"

@pytest.mark.world(N, backend="gloo")
def test_b_destroys_every_group(rank):
    dist.destroy_process_group()

@pytest.mark.world(N)
def test_c_the_session_group_is_back(rank, device):
    assert "cuda:nccl" in dist.get_backend_config() and device.type == "cuda"
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    assert t.item() == N

@pytest.mark.world(N, backend="gloo")
def test_d_gloo_again(rank):
    assert dist.get_backend() == "gloo"
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == N
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_in_place_gloo_tests_on_gpu_ranks_see_a_gloo_group(tmp_path):
    """In place with a GPU per rank the session's group is cpu:gloo,cuda:nccl; a gloo
    test's body still sees gloo, and one that destroys every group leaves the next tests
    (NCCL and gloo) as they were."""
    from rankgate.report.junit import merge_junit

    n = torch.cuda.device_count()
    (tmp_path / "test_suite.py").write_text(GLOO_BESIDE_NCCL.format(n=n))
    proc = run_torchrun_pytest(
        tmp_path, "-q", "test_suite.py", "--junitxml=out/junit.xml", ranks=n, timeout=240
    )
    both = proc.stdout + proc.stderr
    files = sorted((tmp_path / "out").glob("junit.rank*.xml"))
    assert len(files) == n, both
    verdicts = {t.name: t.verdict for t in merge_junit(files, world_size=n).tests}
    assert verdicts == {
        "test_a_gloo_body_sees_gloo": "passed",
        "test_b_destroys_every_group": "failed",
        "test_c_the_session_group_is_back": "passed",
        "test_d_gloo_again": "passed",
    }, both
