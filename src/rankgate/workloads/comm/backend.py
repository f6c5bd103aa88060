"""The communication interface and its process-group backends (``nccl``, ``gloo``).

A backend is created collectively by every rank of a process group and offers:

=================  ==========================================================
all_reduce         in place; ``op`` is sum, max, min or prod
broadcast          in place, from ``src``
all_gather         ``output`` holds world x ``tensor``, rank order, along dim 0
reduce_scatter     ``output`` gets this rank's slice of the reduced ``input``
gather             list of every rank's tensor on ``dst``, None elsewhere
barrier            every rank reaches it
send / recv        point to point, ranks of the backend's group
send_recv          send to one rank while receiving from another (ring exchange)
synchronize        wait (with the timeout) until queued device work is done
destroy            release the group it created; safe to call twice
=================  ==========================================================

Ranks are numbered within the backend's group. Collectives check, before they
start, that every rank passes the same shape and dtype (``check_shapes``, on by
default): a mismatch raises ``ShapeMismatchError`` on every rank naming each rank's
tensor, and a rank that never arrives makes the others raise
``CollectiveTimeoutError`` after ``timeout`` seconds instead of hanging. The check
travels on a small gloo group beside the data, so it costs one host round trip per
collective; hot loops and the benchmark turn it off, and inside a CUDA graph it runs
once, at capture.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import ClassVar

import torch
import torch.distributed as dist

from rankgate.errors import RankgateError

log = logging.getLogger("rankgate.comm")

REDUCE_OPS: dict[str, dist.ReduceOp.RedOpType] = {
    "sum": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "prod": dist.ReduceOp.PRODUCT,
}

# Codes used in the shape signature (stable across ranks; order matters, never reorder).
_OP_CODES = {
    name: i
    for i, name in enumerate(
        ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "gather", "barrier")
    )
}
_DTYPES = (
    torch.float32, torch.float64, torch.float16, torch.bfloat16,
    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
)  # fmt: skip
_MAX_DIMS = 8
_SIG_LEN = 6 + _MAX_DIMS

# torch 2.13 renamed the tensor forms of all_gather and reduce_scatter (the old names
# warn there); older releases have only the old names.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class CommError(RankgateError, RuntimeError):
    """Base class of the communication layer's errors."""


class UnknownBackendError(CommError, ValueError):
    """A backend name that is not one of the valid choices."""


class BackendUnavailableError(CommError):
    """The backend cannot run here; the message says why."""


class ShapeMismatchError(CommError, ValueError):
    """Ranks passed tensors of different shapes or dtypes to one collective."""


class CollectiveTimeoutError(CommError, TimeoutError):
    """A collective did not complete within the backend's timeout."""


class BackendDestroyedError(CommError):
    """An operation on a backend after ``destroy()``."""


def _blocking(opts):
    """``opts`` for a blocking call (``asyncOp`` False, where this torch has it).

    ProcessGroupNCCL then runs the collective on the caller's stream, without its own
    stream and the events between the two: on 2 x H200 a small all_reduce took 16 us
    per call against 19-20 us asynchronously (nccl-tests: 15-17 us).
    """
    if hasattr(opts, "asyncOp"):
        opts.asyncOp = False
    return opts


def _wait(work) -> None:
    """Wait for a process group's work; a blocking NCCL call returns none."""
    if work is not None:
        work.wait()


class _Timeouts:
    """Turns torch's timeout errors inside a collective into CollectiveTimeoutError."""

    __slots__ = ("backend", "op")

    def __init__(self, backend: CommBackend, op: str) -> None:
        self.backend, self.op = backend, op

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> None:
        if isinstance(exc, RuntimeError) and not isinstance(exc, CommError):
            text = str(exc).lower()
            if "timed out" in text or "timeout" in text:
                b = self.backend
                raise CollectiveTimeoutError(
                    f"{b.name}.{self.op} on rank {b.rank}: did not complete within the "
                    f"timeout ({b.timeout if b.timeout is not None else 'default'} s): {exc}"
                ) from exc


def _signature(op: str, tensor: torch.Tensor | None, extra: int) -> list[int]:
    if tensor is None:
        return [_OP_CODES[op], -1, extra, 0, 0, 1] + [-1] * _MAX_DIMS
    dtype = _DTYPES.index(tensor.dtype) if tensor.dtype in _DTYPES else 99
    dims = list(tensor.shape[:_MAX_DIMS]) + [-1] * (_MAX_DIMS - min(tensor.dim(), _MAX_DIMS))
    contiguous = int(tensor.is_contiguous())
    return [_OP_CODES[op], dtype, extra, tensor.numel(), tensor.dim(), contiguous, *dims]


def _describe(sig: list[int]) -> str:
    if sig[1] == -1:
        return "no tensor"
    dtype = _DTYPES[sig[1]] if sig[1] < len(_DTYPES) else "other dtype"
    ndim = sig[4]
    shape = tuple(sig[6 : 6 + min(ndim, _MAX_DIMS)])
    suffix = f" (numel {sig[3]})" if ndim > _MAX_DIMS else ""
    layout = "" if sig[5] else " non-contiguous"
    extra = f", root {sig[2]}" if sig[2] >= 0 else ""
    return f"shape {shape}{suffix} {dtype}{layout}{extra}"


class CommBackend:
    """The interface, implemented over a torch.distributed process group.

    Subclasses name the torch backend they need (``_pg_backend``) and the device
    their tensors live on; ``P2PBackend`` overrides the operations it speeds up.
    """

    name: ClassVar[str] = "base"
    _pg_backend: ClassVar[str] = ""

    def __init__(
        self,
        *,
        group: dist.ProcessGroup | None = None,
        device: torch.device | str | None = None,
        timeout: float | None = None,
        check_shapes: bool = True,
    ) -> None:
        if not dist.is_initialized():
            raise BackendUnavailableError(
                f"{self.name}: torch.distributed is not initialised; call "
                "init_process_group first (the world marker does this for you)"
            )
        self.device = self._resolve_device(device)
        self.timeout = timeout
        self.check_shapes = check_shapes
        self._owns_group = False
        self._ctrl: dist.ProcessGroup | None = None
        self._destroyed = False
        self.selection = None  # set by create_backend: the agreed Selection
        self._allreduce_opts: dict[str, dist.AllreduceOptions] = {}
        self._broadcast_opts: dict[int, dist.BroadcastOptions] = {}
        self.group = self._make_group(group)
        self.rank = dist.get_rank(self.group)
        self.world_size = dist.get_world_size(self.group)
        if check_shapes:
            self._ctrl = self._control_group()

    # -- construction helpers -------------------------------------------------

    def _resolve_device(self, device: torch.device | str | None) -> torch.device:
        return torch.device(device) if device is not None else torch.device("cpu")

    def _timedelta(self) -> timedelta | None:
        return None if self.timeout is None else timedelta(seconds=self.timeout)

    def _make_group(self, group: dist.ProcessGroup | None) -> dist.ProcessGroup:
        if group is not None:
            if self._pg_backend not in dist.get_backend(group):
                raise BackendUnavailableError(
                    f"{self.name} needs a process group with the {self._pg_backend} "
                    f"backend; the one given uses {dist.get_backend(group)}"
                )
            return group
        world = dist.group.WORLD
        if self.timeout is None and self._pg_backend in dist.get_backend(world):
            return world
        # A dedicated group: another torch backend, or a timeout of our own.
        self._owns_group = True
        return dist.new_group(backend=self._pg_backend, timeout=self._timedelta())

    def _control_group(self) -> dist.ProcessGroup:
        if self._pg_backend == "gloo":
            return self.group
        ranks = None if self.group is dist.group.WORLD else dist.get_process_group_ranks(self.group)
        return dist.new_group(ranks=ranks, backend="gloo", timeout=self._timedelta())

    # -- checks ---------------------------------------------------------------

    def _live(self) -> None:
        if self._destroyed:
            raise BackendDestroyedError(f"{self.name} backend was destroyed; create a new one")

    def _check(self, op: str, tensor: torch.Tensor | None, extra: int = -1) -> None:
        """Raise on every rank unless all ranks pass the same shape and dtype."""
        self._live()
        if self._ctrl is None:
            return
        mine = torch.tensor(_signature(op, tensor, extra), dtype=torch.int64)
        every = torch.empty(self.world_size * _SIG_LEN, dtype=torch.int64)
        try:
            _all_gather_single(every, mine, group=self._ctrl)
        except RuntimeError as exc:
            raise CollectiveTimeoutError(
                f"{self.name}.{op} on rank {self.rank}: not every rank reached this "
                f"collective within the timeout ({self.timeout} s); checked before any "
                f"data moved: {exc}"
            ) from exc
        rows = every.view(self.world_size, _SIG_LEN).tolist()
        if any(row != rows[0] for row in rows):
            if len({row[0] for row in rows}) > 1:
                names = {v: k for k, v in _OP_CODES.items()}
                detail = "; ".join(f"rank {r}: {names[row[0]]}" for r, row in enumerate(rows))
                raise ShapeMismatchError(
                    f"{self.name}: ranks called different collectives: {detail}"
                )
            detail = "; ".join(f"rank {r}: {_describe(row)}" for r, row in enumerate(rows))
            raise ShapeMismatchError(
                f"{self.name}.{op}: tensors differ across ranks ({detail}); every rank "
                "must pass the same shape and dtype"
            )

    def _check_local(self, ok: bool, message: str) -> None:
        if not ok:
            raise ValueError(f"{self.name}: {message}")

    # -- the interface --------------------------------------------------------

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduce ``tensor`` over all ranks, in place; returns it."""
        opts = self._allreduce_opts.get(op) or self._new_allreduce_opts(op)
        self._check("all_reduce", tensor)
        target = tensor if tensor.is_contiguous() else tensor.contiguous()
        with _Timeouts(self, "all_reduce"):
            # The process group itself: dist.all_reduce's Python layers cost ~10 us a call.
            _wait(self.group.allreduce([target], opts))
        if target is not tensor:
            tensor.copy_(target)
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Copy rank ``src``'s ``tensor`` to every rank, in place; returns it."""
        opts = self._broadcast_opts.get(src) or self._new_broadcast_opts(src)
        self._check("broadcast", tensor, src)
        target = tensor if tensor.is_contiguous() else tensor.contiguous()
        with _Timeouts(self, "broadcast"):
            _wait(self.group.broadcast([target], opts))
        if target is not tensor:
            tensor.copy_(target)
        return tensor

    def _new_allreduce_opts(self, op: str) -> dist.AllreduceOptions:
        opts = _blocking(dist.AllreduceOptions())
        opts.reduceOp = self._reduce_op(op)
        self._allreduce_opts[op] = opts
        return opts

    def _new_broadcast_opts(self, src: int) -> dist.BroadcastOptions:
        self._global(src)  # range check
        opts = _blocking(dist.BroadcastOptions())
        opts.rootRank, opts.rootTensor = src, 0
        self._broadcast_opts[src] = opts
        return opts

    def all_gather(self, output: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
        """Concatenate every rank's ``tensor`` into ``output`` along dim 0, in rank order."""
        self._check_local(
            output.numel() == tensor.numel() * self.world_size and output.dtype == tensor.dtype,
            f"all_gather output must hold world_size ({self.world_size}) x input "
            f"{tuple(tensor.shape)} {tensor.dtype}; got {tuple(output.shape)} {output.dtype}",
        )
        self._check("all_gather", tensor)
        with _Timeouts(self, "all_gather"):
            _all_gather_single(output, tensor, group=self.group)
        return output

    def reduce_scatter(
        self, output: torch.Tensor, input: torch.Tensor, op: str = "sum"
    ) -> torch.Tensor:
        """Reduce ``input`` over ranks; rank r receives slice r (along dim 0) in ``output``."""
        red = self._reduce_op(op)
        self._check_local(
            input.numel() == output.numel() * self.world_size and output.dtype == input.dtype,
            f"reduce_scatter input must hold world_size ({self.world_size}) x output "
            f"{tuple(output.shape)} {output.dtype}; got {tuple(input.shape)} {input.dtype}",
        )
        self._check("reduce_scatter", input)
        with _Timeouts(self, "reduce_scatter"):
            _reduce_scatter_single(output, input, op=red, group=self.group)
        return output

    def gather(self, tensor: torch.Tensor, dst: int = 0) -> list[torch.Tensor] | None:
        """Every rank's ``tensor`` on rank ``dst`` (a list in rank order); None elsewhere."""
        self._check("gather", tensor, dst)
        out = (
            [torch.empty_like(tensor) for _ in range(self.world_size)] if self.rank == dst else None
        )
        with _Timeouts(self, "gather"):
            dist.gather(tensor, gather_list=out, dst=self._global(dst), group=self.group)
        return out

    def barrier(self) -> None:
        """Return once every rank has called barrier (and, on GPUs, its work is queued)."""
        self._check("barrier", None)
        with _Timeouts(self, "barrier"):
            dist.barrier(group=self.group, **self._barrier_kwargs())

    def send(self, tensor: torch.Tensor, dst: int) -> None:
        """Send ``tensor`` to rank ``dst``; its shape is not checked (point to point)."""
        self._live()
        with _Timeouts(self, "send"):
            dist.send(tensor, dst=self._global(dst), group=self.group)

    def recv(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        """Receive into ``tensor`` from rank ``src``; returns it."""
        self._live()
        with _Timeouts(self, "recv"):
            dist.recv(tensor, src=self._global(src), group=self.group)
        return tensor

    def send_recv(self, send: torch.Tensor, dst: int, recv: torch.Tensor, src: int) -> torch.Tensor:
        """Send ``send`` to ``dst`` while receiving ``recv`` from ``src``, both at once.

        The ring exchange nccl-tests' sendrecv times: every rank may call it at the
        same moment without the even/odd ordering plain send and recv need.
        """
        self._live()
        ops = [
            dist.P2POp(dist.isend, send, self._global(dst), self.group),
            dist.P2POp(dist.irecv, recv, self._global(src), self.group),
        ]
        with _Timeouts(self, "send_recv"):
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        return recv

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait until this rank's queued collectives finished, or raise CollectiveTimeoutError."""
        self._live()

    def destroy(self) -> None:
        """Release what this backend created. Calling it again does nothing."""
        if self._destroyed:
            return
        self._destroyed = True
        for group in {id(g): g for g in (self._ctrl, self.group) if g is not None}.values():
            if group is self.group and not self._owns_group:
                continue
            try:
                dist.destroy_process_group(group)
            except Exception as exc:  # teardown must not mask the caller's error
                log.warning("%s: destroying a process group failed: %s", self.name, exc)
        self._ctrl = None

    def describe(self) -> dict:
        """What this backend is, for logs and benchmark results."""
        return {"backend": self.name, "device": str(self.device), "world_size": self.world_size}

    # -- small helpers --------------------------------------------------------

    def _reduce_op(self, op: str) -> dist.ReduceOp.RedOpType:
        try:
            return REDUCE_OPS[op]
        except KeyError:
            raise ValueError(f"unknown reduce op {op!r}; valid: {', '.join(REDUCE_OPS)}") from None

    def _global(self, group_rank: int) -> int:
        if not 0 <= group_rank < self.world_size:
            raise ValueError(f"rank {group_rank} is outside 0..{self.world_size - 1}")
        if self.group is dist.group.WORLD:
            return group_rank
        return dist.get_global_rank(self.group, group_rank)

    def _barrier_kwargs(self) -> dict:
        return {}

    def __enter__(self) -> CommBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed else f"rank {self.rank}/{self.world_size}"
        return f"<{type(self).__name__} {state} on {self.device}>"


class GlooBackend(CommBackend):
    """CPU tensors through gloo: runs everywhere, the fallback of last resort."""

    name = "gloo"
    _pg_backend = "gloo"


class NcclBackend(CommBackend):
    """CUDA tensors through NCCL, one GPU per rank."""

    name = "nccl"
    _pg_backend = "nccl"

    def __init__(self, **kwargs: object) -> None:
        if not torch.cuda.is_available():
            raise BackendUnavailableError("nccl: CUDA is not available on this rank")
        if not dist.is_nccl_available():
            raise BackendUnavailableError("nccl: this torch build has no NCCL")
        super().__init__(**kwargs)  # type: ignore[arg-type]

    def _resolve_device(self, device: torch.device | str | None) -> torch.device:
        if device is None:
            return torch.device("cuda", torch.cuda.current_device())
        device = torch.device(device)
        if device.type != "cuda":
            raise BackendUnavailableError(f"nccl needs a CUDA device, got {device}")
        return (
            device
            if device.index is not None
            else torch.device("cuda", torch.cuda.current_device())
        )

    def _barrier_kwargs(self) -> dict:
        return {"device_ids": [self.device.index]}

    def synchronize(self, timeout: float | None = None) -> None:
        """Poll an event behind this rank's queued work; raise after ``timeout`` seconds."""
        self._live()
        limit = timeout if timeout is not None else self.timeout
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        if limit is None:
            event.synchronize()
            return
        deadline = time.monotonic() + limit
        while not event.query():
            if time.monotonic() > deadline:
                raise CollectiveTimeoutError(
                    f"{self.name} on rank {self.rank}: queued GPU work did not finish within "
                    f"{limit} s (a peer that never joined a collective?)"
                )
            time.sleep(0.0005)
