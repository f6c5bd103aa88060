"""The p2p all-reduce's per-call dispatch: routed once per kind of payload, then one lookup.

A kind of payload is (shape, dtype, device index, contiguity, reduce op). The first
call of a kind routes it with ``route_all_reduce`` for an eager call and, where the
configuration's CUDA-graph thresholds differ, for a captured one, and keeps a
prepared call for each (the kernel with its staging views and names bound). Every
later call of that kind is one dict lookup and the kernel: no thresholds, limits,
device or size checks, and the capture state is queried only for kinds whose two
routes differ.

So ``auto`` (``P2PConfig(algorithm="auto")``) and a forced kernel pay the same
lookup; auto's one extra is that capture query on sizes where eager and graph calls
take different kernels (a forced kernel routes alike in both modes). The overhead
test (``tests/workloads/test_comm_dispatch.py``) times the two against each other
with a stand-in kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .p2p_route import P2PConfig, route_all_reduce

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
