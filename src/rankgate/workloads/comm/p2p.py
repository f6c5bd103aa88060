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
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.distributed as dist

from . import push_kernel
from .backend import BackendUnavailableError, NcclBackend, log
from .detect import detect_topology

DISABLE_ENV = "RANKGATE_DISABLE_P2P"
"""Set to 1 (or true/yes) to keep ``auto`` away from p2p and refuse ``p2p``."""

# float16 goes to NCCL: torch has no float16 two-shot kernel, and the forced one-shot
# float16 case failed once on 2 x H200 (run 2, cause not yet found; see the results).
P2P_DTYPES = (torch.float32, torch.bfloat16)
TWOSHOT_DTYPES = (torch.float32, torch.bfloat16)
_ALIGN = 16

# One symmetric buffer per (group, device, size) for the life of the process: every
# rendezvous leaves device memory in torch's own cache, so backends created and
# destroyed again and again share one instead of each making its own.
_BUFFERS: dict[tuple[str, int, int], tuple[torch.Tensor, object]] = {}
ALGORITHMS = ("auto", "push", "oneshot", "twoshot")


@dataclass(frozen=True, slots=True, kw_only=True)
class P2PConfig:
    """Sizes that decide which path a payload takes."""

    buffer_bytes: int = 32 << 20
    """Symmetric buffer per rank; payloads up to half of it can take a p2p path."""
    push_max_bytes: int = 0
    """Largest all-reduce served by the push kernel in eager calls; with
    graph_push_max_bytes it sets the size of its slots (a second symmetric buffer of
    2 x world slots). 0: eager calls never push. 2 x H200, eager: a small all-reduce is
    bound by the host's launch, and the push kernel's (through ctypes) took 13-25 us
    against one-shot's 9.5-16 us in the runs with repeated rounds (runs 5-8), so
    pushing pays only in CUDA graphs."""
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
        self.config = cfg = config or P2PConfig()
        # Fixed per backend, so not worked out again on every call (the eager hot path).
        self._graph_differs = cfg.graph_differs
        self._limits = {mode: cfg.limits(mode) for mode in (False, True)}
        self._p2p_limit = cfg.buffer_bytes  # forced kernels: up to the buffer's limit
        if cfg.algorithm == "auto":  # the larger set of thresholds bounds both modes
            self._p2p_limit = max(self._limits[False][3], self._limits[True][3])
        # Never map NVLink multicast, whatever else the process does.
        os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        super().__init__(**kwargs)
        self.fallbacks: Counter[str] = Counter()
        self._views: dict[tuple, torch.Tensor] = {}
        self._peer_bufs: dict[int, torch.Tensor] = {}
        self._buf = self._handle = self._push = None
        self.push_problem: str | None = None
        """Why the push kernel is off for this backend, or None."""
        try:
            if not verified:
                self._verify_peers()
            self._setup_buffer()
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

    def _fallback(self, op: str, reason: str) -> None:
        key = f"{op}: {reason}"
        if key not in self.fallbacks:
            log.info("p2p %s falls back to nccl: %s", op, reason)
        self.fallbacks[key] += 1

    def all_reduce_path(
        self, tensor: torch.Tensor, op: str = "sum", capturing: bool | None = None
    ) -> tuple[str, str]:
        """(path, reason): path is push, oneshot, twoshot or nccl for this payload.

        ``capturing``: route as for a call captured in a CUDA graph (True) or an eager
        one (False); None: as the current stream is.
        """
        cfg = self.config
        if capturing is None:
            capturing = self._graph_differs and torch.cuda.is_current_stream_capturing()
        return route_all_reduce(
            cfg,
            op=op,
            dtype=tensor.dtype,
            nbytes=tensor.nbytes,
            problem=self._payload_problem(tensor, self._p2p_limit),
            capturing=capturing,
            has_twoshot=self._twoshot_op is not None,
            has_push=self._push is not None,
            limits=self._limits[capturing],
        )

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
        path, reason = self.all_reduce_path(tensor, op)
        if path == "nccl":
            self._fallback("all_reduce", reason)
            return super().all_reduce(tensor, op)
        self._check("all_reduce", tensor)
        aligned = tensor.data_ptr() % _ALIGN == 0
        if path == "push":
            if aligned:
                return self._push(tensor, tensor)
            out = self._upper(tensor)
            return tensor.copy_(self._push(out.copy_(tensor), out))
        staging = self._staging(tensor)
        # A misaligned tensor gets its result in the buffer's upper half, then a copy:
        # kernels then see the same alignment on every rank, so launch alike.
        out = tensor if aligned else self._upper(tensor)
        ops = torch.ops.symm_mem
        if path == "oneshot" and aligned and self._copy_op is not None:
            try:  # one kernel: copy in, barrier, read every peer, write out in place
                self._copy_op(staging, tensor, "sum", self._gname, tensor)
                return tensor
            except RuntimeError as exc:  # raised before launch, alike on every rank
                log.info("p2p: fused one-shot copy unavailable (%s); copying first", exc)
                self._copy_op = None
        staging.copy_(tensor)
        if path == "oneshot":
            ops.one_shot_all_reduce_out(staging, "sum", self._gname, out)
        else:
            self._twoshot_op(staging, "sum", self._gname, out)
        if out is not tensor:
            tensor.copy_(out)
        return tensor

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
