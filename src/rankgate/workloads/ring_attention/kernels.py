"""Attention on one block of queries against one block of keys, with its log-sum-exp.

A ring merges per-block results, so each block kernel returns the block's output and
the log-sum-exp of its scores per query row (``lse``); the backward pass takes the
*final* (merged) output and log-sum-exp, which makes each block's gradient exact.

Shapes: ``q`` (batch, heads, q_len, head_dim); ``k``, ``v`` (batch, kv_heads,
k_len, head_dim) with ``heads`` a multiple of ``kv_heads`` (grouped-query attention:
query head ``h`` reads key/value head ``h // (heads // kv_heads)``). ``lse`` is
(batch, heads, q_len) in float32 (float64 for float64 inputs). ``causal`` masks
key ``j`` for query ``i`` when ``j > i + k_len - q_len`` (bottom-right aligned, as
the fused kernels do; the ring only asks for it on square blocks).

Kernels: :class:`MathKernel` (any device; float32 arithmetic, float64 for float64
inputs), :class:`FlashKernel` (CUDA, fp16/bf16: PyTorch's fused flash attention,
``aten._scaled_dot_product_flash_attention`` and its backward) and
:class:`CudnnKernel` (CUDA, fp16/bf16: cuDNN's fused attention through
``aten._scaled_dot_product_cudnn_attention``; on Hopper it is the kernel PyTorch's
``scaled_dot_product_attention`` picks, about 1.8x FlashAttention-2's rate there).
:class:`FusedKernel` (``kernel="auto"`` on GPUs) uses cuDNN and falls back to flash,
once per process and device, naming the error, where cuDNN refuses a call.
"""

from __future__ import annotations

from typing import Protocol

import torch


class BlockKernel(Protocol):
    name: str

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(out, lse) of the block; ``out`` in ``q``'s dtype or wider."""
        ...

    def backward(  # the tensors a fused attention backward takes, as PyTorch's ops do
        self,
        dout: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        lse: torch.Tensor,
        causal: bool,
        scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(dq, dk, dv) of the block, given the merged ``out`` and ``lse`` of its rows."""
        ...


def accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    """Precision of merges and gradient sums: float64 stays, everything else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class MathKernel:
    """Reference arithmetic: scores, masked softmax via the log-sum-exp, by hand."""

    name = "math"

    def _scores(self, q, k, causal, scale):
        b, h, sq, d = q.shape
        hk, sk = k.shape[1], k.shape[2]
        work = accumulate_dtype(q.dtype)
        qg = q.to(work).reshape(b, hk, h // hk, sq, d)
        s = torch.einsum("bkgqd,bksd->bkgqs", qg, k.to(work)) * scale
        if causal:
            keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
            s = s.masked_fill(~keep, float("-inf"))
        return qg, s

    def forward(self, q, k, v, causal, scale):
        b, h, sq, d = q.shape
        _, s = self._scores(q, k, causal, scale)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse.unsqueeze(-1))
        out = torch.einsum("bkgqs,bksd->bkgqd", p, v.to(s.dtype))
        return out.reshape(b, h, sq, d), lse.reshape(b, h, sq)

    def backward(self, dout, q, k, v, out, lse, causal, scale):  # as BlockKernel's
        b, h, sq, d = q.shape
        hk = k.shape[1]
        qg, s = self._scores(q, k, causal, scale)
        work = s.dtype
        p = torch.exp(s - lse.to(work).reshape(b, hk, h // hk, sq, 1))
        do = dout.to(work).reshape(b, hk, h // hk, sq, d)
        o = out.to(work).reshape(b, hk, h // hk, sq, d)
        dv = torch.einsum("bkgqs,bkgqd->bksd", p, do)
        dp = torch.einsum("bkgqd,bksd->bkgqs", do, v.to(work))
        ds = p * (dp - (do * o).sum(-1, keepdim=True))
        dq = torch.einsum("bkgqs,bksd->bkgqd", ds, k.to(work)) * scale
        dk = torch.einsum("bkgqs,bkgqd->bksd", ds, qg) * scale
        return dq.reshape(b, h, sq, d), dk, dv


class FlashKernel:
    """PyTorch's fused flash attention (CUDA, fp16/bf16), which returns the log-sum-exp.

    Grouped-query attention goes to the kernel as is (it reads each key/value head for
    its group of query heads and sums their gradients); where a build refuses that, the
    key/value heads are repeated for the call and their gradients summed back.
    """

    name = "flash"

    def __init__(self) -> None:
        self._rest: tuple | None = None  # a forward's bookkeeping outputs, for backward
        self._native_gqa: bool | None = None

    def forward(self, q, k, v, causal, scale):
        k, v = self._heads(q, k), self._heads(q, v)
        out, lse, *rest = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, causal, False, scale=scale
        )
        if self._rest is None:
            # cum_seq_q, cum_seq_k, philox seed/offset: for dense inputs without dropout
            # the backward ignores their values (as PyTorch's own context parallel does,
            # passing one forward's to every block).
            self._rest = (rest[0], rest[1], rest[4], rest[5])
        return out, lse

    def backward(self, dout, q, k, v, out, lse, causal, scale):  # as BlockKernel's
        if self._rest is None:  # forwards ran elsewhere (a fallback): make the bookkeeping
            tiny = torch.zeros(1, 1, 8, q.shape[-1], device=q.device, dtype=q.dtype)
            self.forward(tiny, tiny, tiny, False, 1.0)
        cum_q, cum_k, seed, offset = self._rest
        hk = k.shape[1]
        k, v = self._heads(q, k), self._heads(q, v)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            dout, q, k, v, out, lse.contiguous(), cum_q, cum_k, q.shape[2], k.shape[2],
            0.0, causal, seed, offset, scale=scale,
        )  # fmt: skip
        if dk.shape[1] != hk:  # heads were repeated for the call: sum each group back
            b, h, s, d = dk.shape
            dk = dk.view(b, hk, h // hk, s, d).sum(2)
            dv = dv.view(b, hk, h // hk, s, d).sum(2)
        return dq, dk, dv

    def _heads(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        if kv.shape[1] == q.shape[1]:
            return kv
        if self._native_gqa is None:
            self._native_gqa = _flash_takes_gqa(q.device, q.dtype)
        return kv if self._native_gqa else kv.repeat_interleave(q.shape[1] // kv.shape[1], dim=1)


class CudnnKernel:
    """cuDNN's fused attention (CUDA, fp16/bf16), which returns the log-sum-exp."""

    name = "cudnn"

    def __init__(self) -> None:
        self._rest: tuple | None = None

    def forward(self, q, k, v, causal, scale):
        out, lse, cum_q, cum_k, _, _, seed, offset, _ = (
            torch.ops.aten._scaled_dot_product_cudnn_attention(
                q, k, v, None, True, 0.0, causal, False, scale=scale
            )
        )
        if self._rest is None:
            self._rest = (cum_q, cum_k, seed, offset)
        return out, lse.reshape(lse.shape[:3])  # cuDNN keeps a trailing dimension of 1

    def backward(self, dout, q, k, v, out, lse, causal, scale):  # as BlockKernel's
        if self._rest is None:
            tiny = torch.zeros(1, 1, 8, q.shape[-1], device=q.device, dtype=q.dtype)
            self.forward(tiny, tiny, tiny, False, 1.0)
        cum_q, cum_k, seed, offset = self._rest
        dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            dout, q, k, v, out, lse.contiguous().unsqueeze(-1), seed, offset, None,
            cum_q, cum_k, q.shape[2], k.shape[2], 0.0, causal, scale=scale,
        )  # fmt: skip
        return dq, dk, dv


FUSED_FALLBACKS: dict[tuple[str, str], str] = {}
"""(device, dtype) -> why cuDNN was given up for flash in this process."""


class FusedKernel:
    """cuDNN first; flash from the first call cuDNN refuses on this device and dtype."""

    def __init__(self) -> None:
        self._cudnn, self._flash = CudnnKernel(), FlashKernel()

    @property
    def name(self) -> str:
        return "cudnn" if not FUSED_FALLBACKS else "flash"

    def forward(self, q, k, v, causal, scale):
        return self._call("forward", q, q, k, v, causal, scale)

    def backward(self, dout, q, k, v, out, lse, causal, scale):  # as BlockKernel's
        return self._call("backward", q, dout, q, k, v, out, lse, causal, scale)

    def _call(self, what, q, *args):
        key = (str(q.device), str(q.dtype))
        if key not in FUSED_FALLBACKS:
            try:
                return getattr(self._cudnn, what)(*args)
            except torch.OutOfMemoryError:
                raise  # memory, not cuDNN refusing these shapes: flash would need it too
            except (RuntimeError, NotImplementedError) as exc:
                FUSED_FALLBACKS[key] = f"cuDNN {what}: {str(exc).splitlines()[0][:200]}"
        return getattr(self._flash, what)(*args)


def _flash_takes_gqa(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this build's flash kernel accepts fewer key/value heads than query heads."""
    q = torch.zeros(1, 4, 8, 64, device=device, dtype=dtype)
    kv = torch.zeros(1, 2, 8, 64, device=device, dtype=dtype)
    try:
        torch.ops.aten._scaled_dot_product_flash_attention(q, kv, kv, 0.0, False, False)
    except RuntimeError:
        return False
    return True


KERNELS = {"flash": FlashKernel, "cudnn": CudnnKernel}


def choose_kernel(q: torch.Tensor, name: str = "auto") -> BlockKernel:
    """``auto``: cuDNN (falling back to flash) on CUDA for fp16/bf16 and head_dim <= 128,
    else math. ``flash``, ``cudnn`` and ``math`` force one."""
    if name == "math":
        return MathKernel()
    fused_ok = q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and q.shape[-1] <= 128
    if name in KERNELS:
        if not fused_ok:
            raise ValueError(
                f"kernel={name!r} needs CUDA tensors in fp16/bf16 with head_dim <= 128, got "
                f"{q.device} {q.dtype} head_dim={q.shape[-1]}: use kernel='math' or 'auto'"
            )
        return KERNELS[name]()
    if name != "auto":
        raise ValueError(f"unknown kernel {name!r}: use 'auto', 'cudnn', 'flash' or 'math'")
    return FusedKernel() if fused_ok else MathKernel()
