"""The p2p all-reduce's dispatch: routed once per kind of payload, and auto as cheap as a forced kernel.

The dispatch here is the one ``P2PBackend`` uses; only the kernels are stand-ins
(``prepare`` below), so the routing, the per-kind table and the capture query are
the real code on the CPU.
"""

from __future__ import annotations

import gc
import time

import pytest
import torch

from rankgate.workloads.comm import P2PConfig
from rankgate.workloads.comm.p2p import route_all_reduce
from rankgate.workloads.comm.p2p_route import MAX_KINDS, AllReduceDispatch, direct_all_reduce
from rankgate.workloads.comm.push_kernel import MAX_SLOT_BYTES

pytestmark = pytest.mark.unit

KiB, MiB = 1 << 10, 1 << 20
CPU = torch.device("cpu")
AUTO = P2PConfig()  # what auto ships with
OVERHEAD_BOUND_NS = 500.0
"""What auto may add to a call of the kernel it runs (the issue's bound: 0.5 us)."""


def forced(path: str) -> P2PConfig:
    """The single backend that runs ``path`` on its own, as ``rankgate bench comm`` makes it."""
    return P2PConfig(push_max_bytes=MAX_SLOT_BYTES, algorithm=path)


class Recorder:
    """A stand-in ``prepare``: a call returns the name of the path it was prepared for."""

    def __init__(self) -> None:
        self.prepared: list[tuple[str, str, tuple, torch.dtype, str]] = []

    def __call__(self, path, reason, tensor, op):
        self.prepared.append((path, reason, tuple(tensor.shape), tensor.dtype, op))

        return lambda t: path


class Capture:
    """A stand-in for CUDA's capture query that counts how often it was asked."""

    def __init__(self, capturing: bool = False) -> None:
        self.capturing, self.asked = capturing, 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.capturing


def dispatch(config=AUTO, prepare=None, capturing=bool, has_push=True) -> AllReduceDispatch:
    return AllReduceDispatch(
        config, device=CPU, prepare=prepare or Recorder(), capturing=capturing,
        has_push=has_push, has_twoshot=True,
    )  # fmt: skip


SIZES = [4, 1 * KiB, 64 * KiB, 256 * KiB, 256 * KiB + 4, 1 * MiB, 2 * MiB, 4 * MiB, 16 * MiB, 32 * MiB]


@pytest.mark.parametrize("nbytes", SIZES)
@pytest.mark.parametrize("capturing", [False, True], ids=["eager", "graph"])
def test_every_kind_takes_the_path_route_all_reduce_gives(nbytes, capturing):
    record = Recorder()
    d = dispatch(prepare=record, capturing=Capture(capturing))
    t = torch.empty(nbytes // 4)
    want = route_all_reduce(AUTO, op="sum", dtype=t.dtype, nbytes=t.nbytes,
                            problem=None if nbytes <= AUTO.payload_max_bytes else "big",
                            capturing=capturing)  # fmt: skip
    assert d.route(t, capturing=capturing)[0] == want[0]
    assert d(t) == want[0]  # the kernel prepared for that path ran


def test_a_kind_is_prepared_once_and_the_capture_query_asked_only_where_routes_differ():
    record, capture = Recorder(), Capture()
    d = dispatch(prepare=record, capturing=capture)
    small, mid = torch.empty(256), torch.empty(1 << 19)  # 1 KiB: push; 2 MiB: oneshot / twoshot
    for _ in range(5):
        d(small)
        d(mid)
    # 1 KiB: one route, one preparation; 2 MiB: eager and graph routes differ, both prepared
    assert [p[0] for p in record.prepared] == ["push", "oneshot", "twoshot"]
    assert capture.asked == 5  # only the 2 MiB calls asked
    capture.capturing = True
    assert d(mid) == "twoshot"


def test_a_forced_kernel_never_asks_whether_a_graph_is_captured():
    capture = Capture(capturing=True)
    d = dispatch(forced("oneshot"), capturing=capture)
    for numel in (256, 1 << 16, 1 << 20):
        assert d(torch.empty(numel)) == "oneshot"
    assert capture.asked == 0


def test_layout_device_dtype_and_op_are_part_of_the_kind():
    record = Recorder()
    d = dispatch(prepare=record)
    t = torch.empty(64, 4)
    assert d(t) == "push"
    assert d(torch.empty(4, 64).t()) == "nccl"  # shape (64, 4) too, but not contiguous
    assert d(t, "max") == "nccl"
    assert d(t.to(torch.float16)) == "nccl"
    reasons = {p[1] for p in record.prepared if p[0] == "nccl"}
    assert reasons == {"non-contiguous tensor", "reduce op max", "dtype torch.float16"}


def test_the_table_starts_over_past_its_limit():
    record = Recorder()
    d = dispatch(prepare=record)
    for n in range(1, MAX_KINDS + 2):
        d(torch.empty(n))
    d(torch.empty(1))  # forgotten when the table started over: prepared again
    assert len(record.prepared) == MAX_KINDS + 2  # push each, eager and captured alike


# --- the overhead bound -------------------------------------------------------------


def _per_call_ns(call, tensor: torch.Tensor, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        call(tensor)
    return (time.perf_counter_ns() - start) / calls


def added_ns(call, baseline, tensor: torch.Tensor, rounds: int = 41, calls: int = 2000) -> float:
    """What ``call`` adds per call over ``baseline``: the least per-call time of each over
    rounds, subtracted.

    Each round times both back to back, in alternating order. Load only ever adds time, so
    the least of many rounds is each call's own cost: under CI's load (load average 9.7 on
    2 cores) the difference of the least times stayed within 25 ns where the median of the
    rounds' differences ranged from -1,187 to +1,747 ns for the same pair of calls.
    """
    for _ in range(200):  # warm: every kind prepared, caches filled
        call(tensor)
        baseline(tensor)
    enabled = gc.isenabled()
    gc.disable()
    try:
        least_call = least_baseline = float("inf")
        for r in range(rounds):
            if r % 2:
                least_call = min(least_call, _per_call_ns(call, tensor, calls))
            least_baseline = min(least_baseline, _per_call_ns(baseline, tensor, calls))
            if not r % 2:
                least_call = min(least_call, _per_call_ns(call, tensor, calls))
        return least_call - least_baseline
    finally:
        if enabled:
            gc.enable()


def least_added_ns(call, baseline, tensor: torch.Tensor, attempts: int = 3) -> float:
    """The least of up to ``attempts`` of ``added_ns``, stopping at the first under the bound.

    An overhead that is really there shows in every attempt; a burst of load on a shared
    2-core machine (seen once at load 7.5) rarely lands on three in a row.
    """
    best = float("inf")
    for _ in range(attempts):
        best = min(best, added_ns(call, baseline, tensor))
        if best < OVERHEAD_BOUND_NS:
            break
    return best


def _kernel(t: torch.Tensor) -> torch.Tensor:
    """The stand-in kernel: the call itself, nothing else."""
    return t


def _prepare_kernel(path, reason, tensor, op):
    """A call of its own per preparation, as ``P2PBackend._prepare`` makes them (so auto's
    eager and graph calls differ and it asks the capture query, as on a GPU)."""

    def kernel(t: torch.Tensor) -> torch.Tensor:
        return t

    return kernel


class StandInGroup:
    """A process group whose all-reduce is the stand-in kernel: returns at once, no work."""

    def allreduce(self, tensors, opts):
        return None


@pytest.fixture
def gloo_backend(tmp_path):
    """A real GlooBackend on a one-rank world whose process group is then the stand-in."""
    import torch.distributed as dist

    from rankgate.workloads.comm import GlooBackend

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process (in-place run)")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        backend = GlooBackend(check_shapes=False)
        backend.group = StandInGroup()
        yield backend
    finally:
        dist.destroy_process_group()


# bool() is a C function returning False, as cheap as CUDA's capture query.
@pytest.mark.parametrize(
    ("numel", "path"),
    [(256, "push"), (1 << 14, "push"), (1 << 18, "oneshot"), (1 << 19, "oneshot"),
     (1 << 20, "twoshot")],
    ids=["1KiB-push", "64KiB-push", "1MiB-oneshot", "2MiB-oneshot-or-twoshot", "4MiB-twoshot"],
)  # fmt: skip
def test_auto_adds_under_half_a_microsecond_to_the_kernel_it_runs(numel, path):
    tensor = torch.empty(numel)
    auto = dispatch(AUTO, prepare=_prepare_kernel, capturing=bool)
    assert auto.route(tensor)[0] == path
    alone = dispatch(forced(path), prepare=_prepare_kernel, capturing=bool)
    extra = least_added_ns(auto, alone, tensor)
    assert extra < OVERHEAD_BOUND_NS, f"auto adds {extra:.0f} ns per call over forced {path}"


def test_auto_on_nccl_sizes_adds_under_half_a_microsecond_to_the_nccl_backend(gloo_backend):
    """Where auto hands a payload to NCCL, against the NCCL backend's own ``all_reduce``
    (``CommBackend.all_reduce``, as gloo's), both on the same stand-in process group."""
    tensor = torch.empty(1 << 24)  # 64 MiB

    def prepare(path, reason, t, op):
        assert path == "nccl"
        return direct_all_reduce(gloo_backend, op)  # what P2PBackend prepares for NCCL kinds

    auto = dispatch(AUTO, prepare=prepare, capturing=bool)
    extra = least_added_ns(auto, gloo_backend.all_reduce, tensor)
    assert extra < OVERHEAD_BOUND_NS, f"auto adds {extra:.0f} ns per call over the NCCL backend"


def test_the_measurement_sees_an_overhead_of_a_microsecond():
    """The bound can fail: a capture query that costs 1 us more is caught."""

    def slow_query() -> bool:
        end = time.perf_counter_ns() + 1000
        while time.perf_counter_ns() < end:
            pass
        return False

    tensor = torch.empty(1 << 19)  # 2 MiB: eager and captured routes differ, so it asks
    slow = dispatch(AUTO, prepare=_prepare_kernel, capturing=slow_query)
    alone = dispatch(forced("oneshot"), prepare=_prepare_kernel, capturing=bool)
    assert added_ns(slow, alone, tensor, rounds=15, calls=500) > OVERHEAD_BOUND_NS
    assert least_added_ns(slow, alone, tensor) > OVERHEAD_BOUND_NS
