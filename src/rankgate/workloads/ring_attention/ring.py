"""Exact attention across ranks: key/value shards travel around a ring.

Each of ``cp`` ranks keeps its query shard and, at every step, computes attention
against the key/value shard it holds while the next one arrives: the send to rank
``r+1`` and the receive from rank ``r-1`` are posted before the step's compute and
waited for after it, so communication overlaps computation. Partial results are
merged by the log-sum-exp rule (``out = out + (block - out)·sigmoid(lse_block - lse)``,
``lse = logaddexp(lse, lse_block)``, in float32), which gives the softmax over every
key exactly.

The backward pass is its own: key/value shards go around the ring again, and the
gradient of each key/value shard travels with it (an accumulator, sent on after each
rank adds its part), arriving at its owner after the last step. Query gradients stay
local. Gradients of fp32/fp64 inputs are summed in that precision; for bf16/fp16
inputs the accumulators keep the input dtype and every addition is done in fp32 and
rounded once (the per-block gradients are already rounded to it by the kernel; at
cp=2 this is exactly an fp32 sum rounded once), which keeps the extra memory at a few
shard-sized buffers: the longest sequence that fits grows with the number of ranks.

Which rows meet which at each step is a plan (:mod:`.plans`); per block the kernel is
a fused one on GPUs (cuDNN's, else flash) or exact math elsewhere (:mod:`.kernels`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from rankgate.workloads.ring_attention.kernels import BlockKernel, accumulate_dtype, choose_kernel
from rankgate.workloads.ring_attention.plans import DualChunkPlan


@dataclass(slots=True)
class CommTimer:
    """Time the compute stream spent waiting for the ring's transfers (exposed time).

    On GPUs: CUDA events around each wait on the current stream, read after a
    synchronisation; on CPUs: the host clock around each wait. ``bytes_sent`` counts
    what this rank sent.
    """

    _events: list = field(default_factory=list)
    _host_seconds: float = 0.0
    bytes_sent: int = 0

    def begin(self, device: torch.device):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            return start
        return time.perf_counter()

    def end(self, token, device: torch.device) -> None:
        if device.type == "cuda":
            stop = torch.cuda.Event(enable_timing=True)
            stop.record()
            self._events.append((token, stop))
        else:
            self._host_seconds += time.perf_counter() - token

    def exposed_seconds(self) -> float:
        """Total waiting so far (synchronises on the recorded events)."""
        total = self._host_seconds
        for start, stop in self._events:
            stop.synchronize()
            total += start.elapsed_time(stop) / 1e3
        return total

    def reset(self) -> None:
        self._events.clear()
        self._host_seconds = 0.0
        self.bytes_sent = 0


class Ring:
    """This rank's place in the ring of ``group`` (the default group if None).

    Without an initialised process group it is a ring of one: no communication.
    """

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        if group is None and not (dist.is_available() and dist.is_initialized()):
            self.group, self.size, self.rank = None, 1, 0
            return
        self.group = group or dist.group.WORLD
        self.size = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)
        self.next = dist.get_global_rank(self.group, (self.rank + 1) % self.size)
        self.prev = dist.get_global_rank(self.group, (self.rank - 1) % self.size)

    def exchange(self, tensors: tuple[torch.Tensor, ...], timer: CommTimer | None = None):
        """Post sends of ``tensors`` to the next rank and receives from the previous one.

        Returns (receive buffers, pending); :meth:`wait` on ``pending`` before using the
        buffers. ``pending`` keeps the sent tensors alive until then: freed earlier, the
        allocator could hand their memory to new work while the send still reads it.
        """
        received = tuple(torch.empty_like(t) for t in tensors)
        ops = [dist.P2POp(dist.isend, t, self.next, self.group) for t in tensors]
        ops += [dist.P2POp(dist.irecv, t, self.prev, self.group) for t in received]
        if timer is not None:
            timer.bytes_sent += sum(t.numel() * t.element_size() for t in tensors)
        return received, (dist.batch_isend_irecv(ops), tensors)

    @staticmethod
    def wait(pending, device: torch.device, timer: CommTimer | None = None) -> None:
        token = timer.begin(device) if timer is not None else None
        requests, _sent = pending
        for request in requests:
            request.wait()
        if timer is not None:
            timer.end(token, device)


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


CALL_HEAD_ROWS = 1 << 18
"""Query heads x rows one kernel call covers before auto splits the heads: on 2 H100s at
world 2 (bf16, 32/8 heads, head_dim 128), one call per block was fastest at 16K tokens
(8.81 ms against 9.63 with 4 calls), two at 32K (benchmarks/results/nvidia-h100-x4/
gpu-pool-and-attention-2026-11-26/attn-chunks-*); from 64K, four bound the memory."""


def auto_head_chunks(heads: int, kv_heads: int, rows: int | None = None) -> int:
    """Chunks of query heads per kernel call: as few as keep each call within
    ``CALL_HEAD_ROWS`` heads x rows (``rows``: batch x this rank's query rows; None: no
    bound), and never more than one per 8 query heads; whole grouped-query groups only.

    A fused backward call holds float32 and expanded-head temporaries for the heads it
    covers: long shards split their heads to bound them, short shards do not, since each
    extra call adds launches and merges that outweigh the memory saved.
    """
    chunks = max(1, heads // 8)
    if rows is not None:
        chunks = min(chunks, max(1, -(-heads * rows // CALL_HEAD_ROWS)))
    while kv_heads % chunks:
        chunks -= 1
    return chunks


def _head_slices(q: torch.Tensor, kv_heads: int, chunks: int | None):
    """(query heads, key/value heads) per chunk: whole grouped-query groups together."""
    heads = q.shape[1]
    if chunks is None:
        chunks = auto_head_chunks(heads, kv_heads, rows=q.shape[0] * q.shape[2])
    if chunks < 1 or kv_heads % chunks:
        raise ValueError(
            f"head_chunks={chunks} must be >= 1 and divide kv_heads={kv_heads} "
            "(each chunk takes whole groups of query heads)"
        )
    qn, kn = heads // chunks, kv_heads // chunks
    return [(slice(c * qn, (c + 1) * qn), slice(c * kn, (c + 1) * kn)) for c in range(chunks)]


def _merge(out, lse, block_out, block_lse, fresh: bool) -> None:
    """Fold one block's (output, lse) into the running ones, in place."""
    if fresh:
        out.copy_(block_out)
        lse.copy_(block_lse)
        return
    weight = torch.sigmoid(block_lse - lse).unsqueeze(-1)
    out.add_((block_out.to(out.dtype) - out).mul_(weight))
    lse.copy_(torch.logaddexp(lse, block_lse))


# the autograd function's saved arguments, passed through unchanged to both passes
def _forward(q, k, v, plan, ring: Ring, kernel: BlockKernel, scale, head_chunks, timer):
    b, h, n, d = q.shape
    acc = accumulate_dtype(q.dtype)
    out = torch.zeros(b, n, h, d, dtype=acc, device=q.device).transpose(1, 2)
    lse = torch.full((b, h, n), float("-inf"), dtype=acc, device=q.device)
    heads = _head_slices(q, k.shape[1], head_chunks)
    kv = (_contiguous(k), _contiguous(v))
    for step in range(ring.size):
        source = (ring.rank - step) % ring.size
        pending = None
        if step + 1 < ring.size:
            arriving, pending = ring.exchange(kv, timer)
        kk, vv = kv
        for block in plan.blocks(ring.rank, source):
            qs, ks = slice(*block.q), slice(*block.k)
            for hq, hk in heads:
                o, lse_block = kernel.forward(
                    q[:, hq, qs], kk[:, hk, ks], vv[:, hk, ks], block.causal, scale
                )
                _merge(out[:, hq, qs], lse[:, hq, qs], o, lse_block, fresh=step == 0)
        if pending is not None:
            ring.wait(pending, q.device, timer)
            kv = arriving
    return out.to(q.dtype), lse


def _grad_dtype(dtype: torch.dtype) -> torch.dtype:
    half = (torch.bfloat16, torch.float16)
    return dtype if dtype in half else accumulate_dtype(dtype)


# as _forward, with the forward's results
def _backward(dout, q, k, v, out, lse, plan, ring: Ring, kernel, scale, head_chunks, timer):
    acc = _grad_dtype(q.dtype)
    dq = torch.zeros_like(q, dtype=acc)
    heads = _head_slices(q, k.shape[1], head_chunks)
    kv = (_contiguous(k), _contiguous(v))
    dkv = dkv_pending = None
    for step in range(ring.size):
        source = (ring.rank - step) % ring.size
        kv_pending = None
        if step + 1 < ring.size:
            arriving, kv_pending = ring.exchange(kv, timer)
        kk, vv = kv
        parts = []
        for block in plan.blocks(ring.rank, source):
            qs, ks = slice(*block.q), slice(*block.k)
            for hq, hk in heads:
                dq_b, dk_b, dv_b = kernel.backward(
                    dout[:, hq, qs], q[:, hq, qs], kk[:, hk, ks], vv[:, hk, ks],
                    out[:, hq, qs], lse[:, hq, qs], block.causal, scale,
                )  # fmt: skip
                dq[:, hq, qs].add_(dq_b)  # in fp32, rounded once to dq's dtype
                parts.append((hk, ks, dk_b, dv_b))
        # The gradient of the visiting shard: start it here, or add to what the ranks
        # before us accumulated, then pass it on (after the last step: to its owner).
        if dkv_pending is None:
            dkv = (torch.zeros_like(kk, dtype=acc), torch.zeros_like(vv, dtype=acc))
        else:
            ring.wait(dkv_pending, q.device, timer)
        for hk, ks, dk_b, dv_b in parts:
            dkv[0][:, hk, ks].add_(dk_b)
            dkv[1][:, hk, ks].add_(dv_b)
        if ring.size > 1:
            dkv, dkv_pending = ring.exchange(dkv, timer)
        if kv_pending is not None:
            ring.wait(kv_pending, q.device, timer)
            kv = arriving
    if dkv_pending is not None:
        ring.wait(dkv_pending, q.device, timer)
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan, ring, kernel, scale, head_chunks, timer):  # as _forward
        out, lse = _forward(q, k, v, plan, ring, kernel, scale, head_chunks, timer)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (plan, ring, kernel, scale, head_chunks, timer)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        if dout.stride(-1) != 1:
            dout = dout.contiguous()
        grads = _backward(dout, q, k, v, out, lse, *ctx.args)
        return (*grads, None, None, None, None, None, None)


def ring_attention(  # q, k, v, the group, then keyword options with defaults (public)
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = True,
    local_cu_seqlens: tuple[int, ...] | None = None,
    plan=None,
    group: dist.ProcessGroup | None = None,
    scale: float | None = None,
    kernel: str | BlockKernel = "auto",
    head_chunks: int | None = None,
    timer: CommTimer | None = None,
) -> torch.Tensor:
    """Attention of this rank's queries over every rank's keys and values.

    ``q`` (batch, heads, n, head_dim), ``k``/``v`` (batch, kv_heads, n, head_dim): this
    rank's shard from :class:`rankgate.workloads.cp.DualChunkSharding` (same ``n`` on
    every rank). BSHD: any batch; THD: batch 1 and ``local_cu_seqlens`` (the
    sharding's), so no token attends across a sequence boundary. ``plan`` replaces
    the dual-chunk plan (see :mod:`.plans`). ``head_chunks`` splits each block's
    kernel calls into that many groups of heads (less temporary memory, same result;
    default :func:`auto_head_chunks`).
    Returns (batch, heads, n, head_dim) in ``q``'s dtype; differentiable.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            "ring_attention takes q, k, v shaped (batch, heads, seq, head_dim); got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        shapes = f"k {tuple(k.shape)} and v {tuple(v.shape)}"
        raise ValueError(f"{shapes} do not match q {tuple(q.shape)}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"heads={q.shape[1]} is not a multiple of kv_heads={k.shape[1]}")
    if plan is None:
        bounds = local_cu_seqlens or (0, q.shape[2])
        if bounds[-1] != q.shape[2]:
            raise ValueError(
                f"local_cu_seqlens ends at {bounds[-1]} but the shard has {q.shape[2]} rows"
            )
        if len(bounds) > 2 and q.shape[0] != 1:
            raise ValueError(f"packed (THD) sequences need batch 1, got batch {q.shape[0]}")
        plan = DualChunkPlan(tuple(bounds), causal=causal)
    block_kernel = choose_kernel(q, kernel) if isinstance(kernel, str) else kernel
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return _RingAttention.apply(q, k, v, plan, Ring(group), block_kernel, scale, head_chunks, timer)


@dataclass(frozen=True, slots=True)
class RingAttention:
    """``attention=`` for :class:`rankgate.workloads.model.TinyTransformer` under CP."""

    local_cu_seqlens: tuple[int, ...] | None = None
    causal: bool = True
    group: dist.ProcessGroup | None = None
    kernel: str = "auto"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return ring_attention(q, k, v, causal=self.causal, local_cu_seqlens=self.local_cu_seqlens,
                              group=self.group, kernel=self.kernel)  # fmt: skip

