"""``p2p``: small all-reduces and broadcasts over GPU peer memory, the rest through NCCL.

Every rank allocates its buffers with PyTorch's symmetric memory
(``torch.distributed._symmetric_memory``) and maps its peers' buffers, so a kernel
on one GPU reads or writes the others' memory over NVLink directly. NVLink multicast
is never used: only kernels that reach peers by pointer, the signal-pad barrier and
the push kernel's flags.

* all_reduce (sum; fp32, bf16): the ``push`` kernel up to ``push_max_bytes`` (every
  rank writes its payload into every peer's buffer, one flag exchange; see
  ``push_kernel``), ``one_shot_all_reduce_copy`` up to ``oneshot_max_bytes`` (one
  kernel: copy in, barrier, every rank reads every peer), ``two_shot_all_reduce`` up
  to ``twoshot_max_bytes`` (reduce-scatter then all-gather through peer memory), NCCL
  above.
* broadcast (any dtype): the root copies into its buffer, a barrier, every other rank
  copies out of the root's buffer, a barrier.
* everything else, and payloads it cannot serve (larger than the buffer, not
  contiguous, another dtype or reduce op, on another device), goes to NCCL; the
  first time each reason occurs it is logged, and ``fallbacks`` counts them.

Each of these is one or a few kernels on the current stream, so the whole path can be
captured in a CUDA graph. The byte thresholds are the crossovers measured by
``rankgate bench comm`` on 2 x H200 (benchmarks/results/nvidia-h200-x2/); pass others
for other machines.
"""

from __future__ import annotations

import os
import socket
import warnings
from collections import Counter
from typing import ClassVar

import torch
import torch.distributed as dist

from . import push_kernel
from .backend import BackendUnavailableError, NcclBackend, log
from .detect import detect_topology
from .p2p_route import (  # noqa: F401 (the config and routing are this module's API too)
    ALGORITHMS,
    P2P_DTYPES,
    TWOSHOT_DTYPES,
    AllReduceDispatch,
    P2PConfig,
    direct_all_reduce,
    route_all_reduce,
)

DISABLE_ENV = "RANKGATE_DISABLE_P2P"
"""Set to 1 (or true/yes) to keep ``auto`` away from p2p and refuse ``p2p``."""
_ALIGN = 16

# One symmetric buffer per (group, device, size) for the life of the process: every
# rendezvous leaves device memory in torch's own cache, so backends created and
# destroyed again and again share one instead of each making its own.
_BUFFERS: dict[tuple[str, int, int], tuple[torch.Tensor, object]] = {}


def disabled_by_env(environ: dict[str, str] | os._Environ | None = None) -> str | None:
    """The reason p2p is switched off by the environment, or None."""
    value = (environ if environ is not None else os.environ).get(DISABLE_ENV, "")
    if value.strip().lower() in ("1", "true", "yes", "on"):
        return f"disabled by {DISABLE_ENV}={value}"
    return None


def symm_mem_problem() -> str | None:
    """Why this torch cannot provide symmetric memory, or None."""
    try:
        import torch.distributed._symmetric_memory as symm_mem  # noqa: F401
    except Exception as exc:
        return f"torch.distributed._symmetric_memory unavailable: {exc}"
    if not hasattr(torch.ops.symm_mem, "one_shot_all_reduce_out"):
        return "this torch has no symm_mem one_shot_all_reduce_out kernel"
    return None


def peer_problem(members: list[dict]) -> str | None:
    """Why these ranks cannot reach each other's GPUs, or None.

    ``members[r]`` holds rank r's ``host``, ``device`` (index or None) and
    ``access``: {device index: [can I reach it, can it reach me]} for its host's GPUs.
    """
    if len(members) < 2:
        return "p2p needs at least 2 ranks"
    hosts = {m["host"] for m in members}
    if len(hosts) > 1:
        return f"ranks span {len(hosts)} hosts; peer memory works within one host"
    devices = [m["device"] for m in members]
    if any(d is None for d in devices):
        return "a rank has no CUDA device"
    if len(set(devices)) < len(devices):
        return f"ranks share GPUs (devices {devices})"
    for r, m in enumerate(members):
        for s, d in enumerate(devices):
            if s == r:
                continue
            to, back = m["access"].get(str(d), m["access"].get(d, [False, False]))
            if not (to and back):
                way = "no peer access" if not (to or back) else "asymmetric peer access"
                return f"{way} between GPU{m['device']} (rank {r}) and GPU{d} (rank {s})"
    return None


def local_member(device: torch.device | None) -> dict:
    """This rank's entry for ``peer_problem`` (host, device, access to visible GPUs)."""
    member: dict = {"host": socket.gethostname(), "device": None, "access": {}}
    if device is None or device.type != "cuda":
        return member
    topo = detect_topology(read_links=None)  # access only; links are not needed
    me = device.index
    member["device"] = me
    if me is None or me >= len(topo.devices):
        return member
    member["access"] = {
        str(d): [topo.peer_access[me][d], topo.peer_access[d][me]] for d in topo.devices
    }
    return member


class P2PBackend(NcclBackend):
    """NCCL with small all-reduces and broadcasts done through symmetric memory."""

    name: ClassVar[str] = "p2p"

    def __init__(self, *, config: P2PConfig | None = None, verified: bool = False, **kwargs):
        """``verified``: the ranks already agreed p2p can run (``create_backend`` did)."""
        self.config = config or P2PConfig()
        self._dispatch: AllReduceDispatch | None = None
        # Never map NVLink multicast, whatever else the process does.
        os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        super().__init__(**kwargs)
        self._fallbacks: dict[str, list[int]] = {}
        self._views: dict[tuple, torch.Tensor] = {}
        self._peer_bufs: dict[int, torch.Tensor] = {}
        self._buf = self._handle = self._push = None
        self.push_problem: str | None = None
        """Why the push kernel is off for this backend, or None."""
        try:
            if not verified:
                self._verify_peers()
            self._setup_buffer()
            self._dispatch = AllReduceDispatch(
                self.config,
                device=self.device,
                prepare=self._prepare,
                capturing=_capture_query(),
                has_push=self._push is not None,
                has_twoshot=self._twoshot_op is not None,
            )
        except BaseException:
            super().destroy()
            raise

    def _verify_peers(self) -> None:
        """Every rank learns every rank's obstacles, so all raise or none does."""
        mine = local_member(self.device)
        mine["p2p"] = disabled_by_env() or symm_mem_problem()
        members: list = [None] * self.world_size
        dist.all_gather_object(members, mine, group=self.group)
        blocked = [f"rank {r}: {m['p2p']}" for r, m in enumerate(members) if m["p2p"]]
        problem = blocked[0] if blocked else peer_problem(members)
        if problem:
            raise BackendUnavailableError(f"p2p: {problem}")

    def _setup_buffer(self) -> None:
        # A group this backend made for itself has WORLD's ranks: map memory over WORLD,
        # which outlives it, so the cached buffer stays usable.
        symm_group = dist.group.WORLD if self._owns_group else self.group
        self._gname = symm_group.group_name
        key = (self._gname, self.device.index, self.config.buffer_bytes)
        if key not in _BUFFERS:
            _BUFFERS[key] = self._new_buffer(symm_group)
        self._buf, self._handle = _BUFFERS[key]
        ops = torch.ops.symm_mem
        self._copy_op = getattr(ops, "one_shot_all_reduce_copy_out", None)
        self._twoshot_op = getattr(ops, "two_shot_all_reduce_out", None)
        self._setup_push(symm_group)

    def _setup_push(self, symm_group: dist.ProcessGroup) -> None:
        """The push kernel's own buffer, reset on every rank; or None with the reason logged."""
        slot = self.config.push_slot_bytes
        problem = self._push_problem(slot)
        # Every rank must agree: one rank on push and another on one-shot would hang both.
        problems: list = [None] * self.world_size
        dist.all_gather_object(problems, problem, group=self.group)
        problem = next((f"rank {r}: {p}" for r, p in enumerate(problems) if p), None)
        if problem:
            self.push_problem = problem
            log.info("p2p: push all_reduce off: %s", problem)
            return
        size = push_kernel.buffer_bytes(self.world_size, slot)
        key = (self._gname, self.device.index, size)
        if key not in _BUFFERS:
            _BUFFERS[key] = self._new_buffer(symm_group, size)
        buf, handle = _BUFFERS[key]
        peers = [
            handle.get_buffer(r, (size,), torch.uint8).data_ptr() for r in range(self.world_size)
        ]
        timeout = self.timeout if self.timeout is not None else 600.0
        self._push = push_kernel.PushAllReduce(
            buffer=buf, peer_ptrs=peers, rank=self.rank, slot_bytes=slot, timeout_s=timeout
        )
        self._push.reset()
        torch.cuda.synchronize(self.device)
        dist.barrier(group=self.group, device_ids=[self.device.index])

    def _push_problem(self, slot: int) -> str | None:
        if slot == 0:
            return "push_max_bytes is 0"
        if self.world_size > push_kernel.MAX_WORLD:
            return f"{self.world_size} ranks; the push kernel serves up to {push_kernel.MAX_WORLD}"
        try:
            push_kernel.compile_all(self.device)
        except Exception as exc:  # NVRTC missing or failing: the other paths still work
            return f"cannot compile the push kernel: {exc}"
        return None

    def _new_buffer(
        self, symm_group: dist.ProcessGroup, size: int | None = None
    ) -> tuple[torch.Tensor, object]:
        import torch.distributed._symmetric_memory as symm_mem

        size = size or self.config.buffer_bytes
        with torch.cuda.device(self.device):
            buf = symm_mem.empty(size, dtype=torch.uint8, device=self.device)
            try:
                handle = symm_mem.rendezvous(buf, symm_group)
            except RuntimeError:
                # Older torch wants the group registered first (deprecated later).
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FutureWarning)
                    symm_mem.enable_symm_mem_for_group(self._gname)
                handle = symm_mem.rendezvous(buf, symm_group)
        return buf, handle

    # -- routing ----------------------------------------------------------------

    def _payload_problem(self, tensor: torch.Tensor, limit: int) -> str | None:
        if tensor.device != self.device:
            return f"tensor on {tensor.device}, backend on {self.device}"
        if not tensor.is_contiguous():
            return "non-contiguous tensor"
        limit = min(limit, self.config.payload_max_bytes)
        if tensor.nbytes > limit:
            return f"payload over {limit} bytes"
        return None

    def _fallback_count(self, op: str, reason: str) -> list[int]:
        """The counter of one fallback reason; the first time a reason occurs it is logged."""
        key = f"{op}: {reason}"
        if key not in self._fallbacks:
            log.info("p2p %s falls back to nccl: %s", op, reason)
            self._fallbacks[key] = [0]
        return self._fallbacks[key]

    def _fallback(self, op: str, reason: str) -> None:
        self._fallback_count(op, reason)[0] += 1

    @property
    def fallbacks(self) -> Counter[str]:
        """Calls handed to NCCL, by "op: reason" (reasons that occurred at least once)."""
        return Counter({key: n[0] for key, n in self._fallbacks.items() if n[0]})

    def all_reduce_path(
        self, tensor: torch.Tensor, op: str = "sum", capturing: bool | None = None
    ) -> tuple[str, str]:
        """(path, reason): path is push, oneshot, twoshot or nccl for this payload.

        ``capturing``: route as for a call captured in a CUDA graph (True) or an eager
        one (False); None: as the current stream is.
        """
        self._live()
        if capturing is None:
            capturing = self._dispatch.is_capturing()
        return self._dispatch.route(tensor, op, capturing)

    def _staging(self, tensor: torch.Tensor) -> torch.Tensor:
        key = (tensor.dtype, tensor.shape)
        view = self._views.get(key)
        if view is None:
            if len(self._views) > 256:
                self._views.clear()
            view = self._buf[: tensor.nbytes].view(tensor.dtype).view(tensor.shape)
            self._views[key] = view
        return view

    # -- operations it serves -----------------------------------------------------

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduce ``tensor`` over all ranks, in place, by the path its kind was routed to."""
        if self._dispatch is None:
            self._live()
        return self._dispatch(tensor, op)

    def _prepare(self, path: str, reason: str, tensor: torch.Tensor, op: str):
        """The call that runs ``path`` for payloads like ``tensor`` (``AllReduceDispatch``).

        Staging views, names and kernels are bound here, once per kind of payload, so a
        call does only what depends on the tensor itself: its alignment and the launch.
        """
        self._live()
        if path == "nccl":
            contiguous = tensor.is_contiguous()
            run = self._prepare_nccl(reason, op, contiguous)
            if not contiguous:  # NcclBackend.all_reduce checks the shapes itself
                return run
        else:
            run = {"push": self._prepare_push, "oneshot": self._prepare_oneshot,
                   "twoshot": self._prepare_twoshot}[path](tensor)  # fmt: skip
        if self._ctrl is None:
            return run
        check = self._check

        def checked(t: torch.Tensor) -> torch.Tensor:
            check("all_reduce", t)
            return run(t)

        return checked

    def _prepare_nccl(self, reason: str, op: str, contiguous: bool):
        count = self._fallback_count("all_reduce", reason)
        if contiguous:  # straight to the process group, options bound once
            return direct_all_reduce(self, op, count)
        nccl = super().all_reduce  # copies a non-contiguous tensor in and out

        def run(t: torch.Tensor) -> torch.Tensor:
            count[0] += 1
            return nccl(t, op)

        return run

    def _prepare_push(self, tensor: torch.Tensor):
        push, upper = self._push, self._upper(tensor)

        def run(t: torch.Tensor) -> torch.Tensor:
            if t.data_ptr() % _ALIGN == 0:
                return push(t, t)
            # Misaligned: through the buffer's upper half, so every rank launches alike.
            return t.copy_(push(upper.copy_(t), upper))

        return run

    def _prepare_oneshot(self, tensor: torch.Tensor):
        staging, upper, gname = self._staging(tensor), self._upper(tensor), self._gname
        unfused = torch.ops.symm_mem.one_shot_all_reduce_out

        def run(t: torch.Tensor) -> torch.Tensor:
            aligned = t.data_ptr() % _ALIGN == 0
            if aligned and self._copy_op is not None:
                try:  # one kernel: copy in, barrier, read every peer, write out in place
                    self._copy_op(staging, t, "sum", gname, t)
                    return t
                except RuntimeError as exc:  # raised before launch, alike on every rank
                    log.info("p2p: fused one-shot copy unavailable (%s); copying first", exc)
                    self._copy_op = None
            staging.copy_(t)
            # A misaligned tensor gets its result in the buffer's upper half, then a
            # copy: kernels then see the same alignment on every rank, so launch alike.
            out = t if aligned else upper
            unfused(staging, "sum", gname, out)
            return t if aligned else t.copy_(out)

        return run

    def _prepare_twoshot(self, tensor: torch.Tensor):
        staging, upper = self._staging(tensor), self._upper(tensor)
        gname, twoshot = self._gname, self._twoshot_op

        def run(t: torch.Tensor) -> torch.Tensor:
            aligned = t.data_ptr() % _ALIGN == 0
            staging.copy_(t)
            out = t if aligned else upper
            twoshot(staging, "sum", gname, out)
            return t if aligned else t.copy_(out)

        return run

    def _upper(self, tensor: torch.Tensor) -> torch.Tensor:
        half = self.config.buffer_bytes // 2
        region = self._buf[half : half + tensor.nbytes]
        return region.view(tensor.dtype).view(tensor.shape)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        limit = self.config.broadcast_max_bytes
        problem = self._payload_problem(tensor, limit) if limit else "broadcast_max_bytes is 0"
        if problem:
            self._fallback("broadcast", problem)
            return super().broadcast(tensor, src)
        if not 0 <= src < self.world_size:
            raise ValueError(f"rank {src} is outside 0..{self.world_size - 1}")
        self._check("broadcast", tensor, src)
        if self.rank == src:
            self._staging(tensor).copy_(tensor)
        self._handle.barrier(channel=0)
        if self.rank != src:
            peer = self._peer_bufs.get(src)
            if peer is None:
                peer = self._handle.get_buffer(src, (self.config.buffer_bytes,), torch.uint8)
                self._peer_bufs[src] = peer
            tensor.copy_(peer[: tensor.nbytes].view(tensor.dtype).view(tensor.shape))
        self._handle.barrier(channel=0)
        return tensor

    def destroy(self) -> None:
        """Release the group; the symmetric buffer stays cached for the next p2p backend."""
        if self._destroyed:
            return
        if self._dispatch is not None:
            self._dispatch.clear()
        self._views.clear()
        self._peer_bufs.clear()
        self._handle = self._push = None
        self._buf = None
        super().destroy()

    def describe(self) -> dict:
        info = super().describe()
        cfg = self.config
        info.update(
            buffer_bytes=cfg.buffer_bytes,
            oneshot_max_bytes=cfg.oneshot_max_bytes,
            twoshot_max_bytes=cfg.twoshot_max_bytes,
            push_max_bytes=cfg.push_max_bytes if self._push is not None else 0,
            broadcast_max_bytes=cfg.broadcast_max_bytes,
            algorithm=cfg.algorithm,
        )
        return info


def _capture_query():
    """CUDA's own "is the current stream capturing" (the C function torch.cuda wraps)."""
    query = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)
    return query if query is not None else torch.cuda.is_current_stream_capturing
