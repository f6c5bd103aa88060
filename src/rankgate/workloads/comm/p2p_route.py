"""The p2p backend's routing: its configuration, the pure decision, and the per-call table.

``P2PConfig`` holds the sizes that decide which kernel serves an all-reduce, eagerly
and while a CUDA graph is captured; ``route_all_reduce`` is the decision itself, a pure
function of what every rank shares once shapes agree (never a pointer), so every rank
takes the same path. Kept apart from the backend so the routing and its tests need no
process group.

``AllReduceDispatch`` is the per-call side: each kind of payload (shape, dtype, device
index, contiguity, reduce op) is routed once, with ``route_all_reduce`` for an eager
call and, where the configuration's CUDA-graph thresholds differ, for a captured one,
and a prepared call is kept for each (the kernel with its staging views and names
bound). Every later call of that kind is one dict lookup and the kernel: no
thresholds, limits, device or size checks, and the capture state is queried only for
kinds whose two routes differ.

So ``auto`` (``P2PConfig(algorithm="auto")``) and a forced kernel pay the same
lookup; auto's one extra is that capture query on sizes where eager and graph calls
take different kernels (a forced kernel routes alike in both modes). The overhead
test (``tests/workloads/test_comm_p2p_route_calls.py``) times the two against each
other with a stand-in kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import push_kernel

# float16 goes to NCCL: torch has no float16 two-shot kernel, and the forced one-shot
# float16 case failed once on 2 x H200 (run 2, cause not yet found; see the results).
P2P_DTYPES = (torch.float32, torch.bfloat16)
TWOSHOT_DTYPES = (torch.float32, torch.bfloat16)
ALGORITHMS = ("auto", "push", "oneshot", "twoshot")


@dataclass(frozen=True, slots=True, kw_only=True)
class P2PConfig:
    """Sizes that decide which path a payload takes."""

    buffer_bytes: int = 32 << 20
    """Symmetric buffer per rank; payloads up to half of it can take a p2p path."""
    push_max_bytes: int = 256 << 10
    """Largest all-reduce served by the push kernel in eager calls; with
    graph_push_max_bytes it sets the size of its slots (a second symmetric buffer of
    2 x world slots). 0: eager calls never push. Eagerly a small all-reduce is bound by
    the host's launch. Earlier 2 x H200 runs (5-8) had the push kernel's launch (through
    ctypes) at 13-25 us against one-shot's 9.5-16 us; since then two runs had push the
    fastest eager backend from 2 KiB to 256 KiB: 2 x H200 at 256 KiB 8.7 us against
    one-shot's 13.9, and 2 x H100 8.5-10.7 us against one-shot's 10.7-17.3 (auto, then
    one-shot, 1.21-1.47x the fastest; benchmarks/results/nvidia-h100-x2/
    two-gpus-2026-11-26/comm-oneshot-eager)."""
    graph_push_max_bytes: int | None = 256 << 10
    """As push_max_bytes, while a CUDA graph is being captured (None: the same); 256 KiB
    is the kernel's largest slot. 2 x H200, graph: push the fastest single backend at
    every size from 1 KiB to 256 KiB, fp32 and bf16 (runs 7 and 8: 4.9-7.2 us; one-shot
    10-11 us at 256 KiB)."""
    oneshot_max_bytes: int = 2 << 20
    """Largest all-reduce served by the one-shot kernel (2 x H200, eager: one-shot was
    the fastest single backend up to 2 MiB in both runs)."""
    twoshot_max_bytes: int = 8 << 20
    """Largest all-reduce served by the two-shot kernel, beyond which NCCL (2 x H200,
    eager: at 8 MiB two-shot and NCCL were within 6% of each other, either way)."""
    graph_oneshot_max_bytes: int | None = 1 << 20
    """As oneshot_max_bytes, while a CUDA graph is being captured (None: the same).
    2 x H200, graph: one-shot the fastest at 512 KiB and 1 MiB (15.5-16.1 us against
    two-shot's 16.7-17.0 at 1 MiB, runs 7 and 8), two-shot from 2 MiB."""
    graph_twoshot_max_bytes: int | None = 16 << 20
    """As twoshot_max_bytes, during capture (2 x H200, graph: two-shot the fastest from
    2 to 32 MiB; 16 MiB is the default buffer's limit, and at 32 MiB NCCL took
    1.00-1.04x two-shot's time in runs 7 and 8)."""
    broadcast_max_bytes: int = 0
    """Largest broadcast served through peer memory (beyond: NCCL). 0: every broadcast
    goes to NCCL, which measured faster at every size on 2 x H200."""
    algorithm: str = "auto"
    """auto: by size as above; oneshot / twoshot: force one kernel (benchmarks)."""

    def __post_init__(self) -> None:
        if self.buffer_bytes <= 0 or self.buffer_bytes % 16:
            raise ValueError(
                f"buffer_bytes must be a positive multiple of 16, got {self.buffer_bytes}"
            )
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"unknown algorithm {self.algorithm!r}; valid: {', '.join(ALGORITHMS)}"
            )
        for name in ("oneshot_max_bytes", "twoshot_max_bytes", "broadcast_max_bytes",
                     "push_max_bytes", "graph_push_max_bytes",
                     "graph_oneshot_max_bytes", "graph_twoshot_max_bytes"):  # fmt: skip
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.push_max_bytes % 16:
            raise ValueError(f"push_max_bytes must be a multiple of 16, got {self.push_max_bytes}")
        if self.push_slot_bytes > push_kernel.MAX_SLOT_BYTES:
            raise ValueError(
                f"push_max_bytes and graph_push_max_bytes must be at most "
                f"{push_kernel.MAX_SLOT_BYTES}, got {self.push_slot_bytes}"
            )

    def thresholds(self, capturing: bool) -> tuple[int, int, int]:
        """(push max, one-shot max, two-shot max) for eager calls or calls being captured."""
        push, one, two = self.push_max_bytes, self.oneshot_max_bytes, self.twoshot_max_bytes
        if capturing:
            push = push if self.graph_push_max_bytes is None else self.graph_push_max_bytes
            one = one if self.graph_oneshot_max_bytes is None else self.graph_oneshot_max_bytes
            two = two if self.graph_twoshot_max_bytes is None else self.graph_twoshot_max_bytes
        return push, one, two

    def limits(self, capturing: bool) -> tuple[int, int, int, int]:
        """``thresholds(capturing)`` and the largest of them (what ``auto`` routes by)."""
        push, one, two = self.thresholds(capturing)
        return push, one, two, max(push, one, two)

    @property
    def payload_max_bytes(self) -> int:
        """Largest payload one-shot and two-shot take: half the buffer (the other half
        takes the output of a misaligned tensor)."""
        return self.buffer_bytes // 2

    @property
    def push_slot_bytes(self) -> int:
        """The largest payload the push kernel may get, in either mode (rounded up to 16)."""
        most = max(self.push_max_bytes, self.graph_push_max_bytes or 0)
        return -(-most // 16) * 16

    @property
    def graph_differs(self) -> bool:
        return self.thresholds(True) != self.thresholds(False)


def route_all_reduce(  # pure and keyword-only: every input of the decision is visible
    cfg: P2PConfig,
    *,
    op: str,
    dtype: torch.dtype,
    nbytes: int,
    problem: str | None,
    capturing: bool = False,
    has_twoshot: bool = True,
    has_push: bool = True,
    limits: tuple[int, int, int, int] | None = None,
) -> tuple[str, str]:
    """(path, reason) for one all-reduce: push, oneshot, twoshot or nccl.

    ``problem`` is what stops any p2p path for this tensor (device, layout, size over
    half the buffer), or None. ``limits`` is ``cfg.limits(capturing)`` worked out
    beforehand (the backend keeps both modes': on 2 x H200 working them out on every
    eager call cost auto ~0.3 us, 3% of a small all-reduce). Everything here is shared
    by all ranks once shapes agree, and never a pointer, so every rank takes the same
    path.
    """
    if op != "sum":
        return "nccl", f"reduce op {op}"
    if dtype not in P2P_DTYPES:
        return "nccl", f"dtype {dtype}"
    if nbytes % 4:
        return "nccl", "size not a multiple of 4 bytes"
    if problem:
        return "nccl", problem
    if cfg.algorithm == "auto":
        push, one, _two, top = limits or cfg.limits(capturing)
        if nbytes > top:
            return "nccl", f"payload over {top} bytes"
        path = "oneshot" if nbytes <= one else "twoshot"
        if nbytes <= push and has_push:
            path = "push"
    else:
        path = cfg.algorithm
    if path == "push" and not has_push:
        return "nccl", "no push kernel here"
    if path == "push" and nbytes > cfg.push_slot_bytes:
        return "nccl", f"payload over the push slot of {cfg.push_slot_bytes} bytes"
    if path == "twoshot" and (not has_twoshot or dtype not in TWOSHOT_DTYPES):
        return "nccl", f"no two-shot kernel for {dtype}"
    return path, ""


# --------------------------------------------------------------------------- per call

Call = Callable[[torch.Tensor], torch.Tensor]
"""A prepared all-reduce of one kind of payload: takes the tensor, returns it reduced."""
Prepare = Callable[[str, str, torch.Tensor, str], Call]
"""(path, reason, a tensor of the kind, op) -> the prepared call for that path."""

MAX_KINDS = 256
"""Kinds kept before the table starts over (a program cycling through shapes)."""


class AllReduceDispatch:
    """Routes each all-reduce to a call prepared for its kind of payload (see the module)."""

    __slots__ = ("_capturing", "_graph_differs", "_limits", "_p2p_limit", "_plans", "_prepare",
                 "config", "device", "has_push", "has_twoshot")  # fmt: skip

    def __init__(
        self,
        config: P2PConfig,
        *,
        device: torch.device,
        prepare: Prepare,
        capturing: Callable[[], bool],
        has_push: bool,
        has_twoshot: bool,
    ) -> None:
        """``prepare`` builds the call for a path; ``capturing`` says whether the current
        stream is being captured into a CUDA graph (``torch.cuda``'s query on GPUs)."""
        self.config, self.device = config, device
        self.has_push, self.has_twoshot = has_push, has_twoshot
        self._prepare, self._capturing = prepare, capturing
        self._plans: dict[tuple, tuple[Call, Call]] = {}
        self._limits = {mode: config.limits(mode) for mode in (False, True)}
        self._graph_differs = config.algorithm == "auto" and config.graph_differs
        # Forced kernels go up to the buffer's limit; auto's larger set of thresholds
        # bounds both of its modes.
        self._p2p_limit = config.buffer_bytes
        if config.algorithm == "auto":
            self._p2p_limit = max(self._limits[False][3], self._limits[True][3])

    def __call__(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """All-reduce ``tensor`` in place through its kind's prepared call; returns it."""
        kind = (tensor.shape, tensor.dtype, tensor.get_device(), tensor.is_contiguous(), op)
        plans = self._plans.get(kind)
        if plans is None:
            plans = self._plan(kind, tensor, op)
        eager, graph = plans
        if graph is not eager and self._capturing():
            return graph(tensor)
        return eager(tensor)

    def route(
        self, tensor: torch.Tensor, op: str = "sum", capturing: bool = False
    ) -> tuple[str, str]:
        """(path, reason): push, oneshot, twoshot or nccl (``route_all_reduce``)."""
        capturing = capturing and self._graph_differs
        return route_all_reduce(
            self.config,
            op=op,
            dtype=tensor.dtype,
            nbytes=tensor.nbytes,
            problem=self._payload_problem(tensor),
            capturing=capturing,
            has_twoshot=self.has_twoshot,
            has_push=self.has_push,
            limits=self._limits[capturing],
        )

    def is_capturing(self) -> bool:
        """Whether a call now would be routed as captured (False where both modes agree)."""
        return self._graph_differs and bool(self._capturing())

    def clear(self) -> None:
        """Forget every prepared call (the backend is gone, or its kernels changed)."""
        self._plans.clear()

    def _plan(self, kind: tuple, tensor: torch.Tensor, op: str) -> tuple[Call, Call]:
        eager_route = self.route(tensor, op, capturing=False)
        graph_route = self.route(tensor, op, capturing=True)
        eager = self._prepare(*eager_route, tensor, op)
        graph = eager if graph_route == eager_route else self._prepare(*graph_route, tensor, op)
        if len(self._plans) >= MAX_KINDS:
            self._plans.clear()
        self._plans[kind] = plans = (eager, graph)
        return plans

    def _payload_problem(self, tensor: torch.Tensor) -> str | None:
        if tensor.device != self.device:
            return f"tensor on {tensor.device}, backend on {self.device}"
        if not tensor.is_contiguous():
            return "non-contiguous tensor"
        limit = min(self._p2p_limit, self.config.payload_max_bytes)
        if tensor.nbytes > limit:
            return f"payload over {limit} bytes"
        return None


def direct_all_reduce(backend, op: str, count: list[int] | None = None) -> Call:
    """In-place all-reduce of contiguous tensors straight through ``backend``'s process group.

    What ``CommBackend.all_reduce`` does, less what the dispatch settled once per kind
    (options, layout, the backend being alive): the call a p2p backend's NCCL-routed
    kinds take, so auto on NCCL sizes costs no more than the NCCL backend itself.
    ``count[0]`` goes up by one per call (the p2p backend's fallback counter).
    """
    from .backend import _Timeouts

    opts = backend._allreduce_opts.get(op) or backend._new_allreduce_opts(op)
    allreduce = backend.group.allreduce

    count = count if count is not None else [0]

    def run(t: torch.Tensor) -> torch.Tensor:
        count[0] += 1
        try:
            work = allreduce([t], opts)
            if work is not None:  # a blocking NCCL call returns none
                work.wait()
        except RuntimeError:
            with _Timeouts(backend, "all_reduce"):  # a timeout becomes CollectiveTimeoutError
                raise
        return t

    return run
