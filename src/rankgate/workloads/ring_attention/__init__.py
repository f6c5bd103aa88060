"""Ring attention: exact attention over a sequence sharded across ranks.

Main API:

- :func:`ring_attention` (q, k, v, causal=..., local_cu_seqlens=..., group=...): the
  rank's shard of causal (load-balanced dual chunks) or full attention, BSHD or THD,
  grouped-query; forward and backward overlap send/receive with compute.
- :class:`RingAttention`: the same as a model's ``attention=`` callable.
- :func:`dilated_attention` with :class:`DilatedConfig` (segment lengths, dilation
  rates) over the same ring.
- :class:`CommTimer`: exposed communication time, measured on the compute stream.
- :mod:`.reference`: single-process baselines; :mod:`.kernels`: per-block attention
  (cuDNN's or flash's fused kernel on GPUs, exact math elsewhere); :mod:`.plans`.

Shards come from :mod:`rankgate.workloads.cp`.
"""

from rankgate.workloads.ring_attention.dilated import DilatedConfig, dilated_attention
from rankgate.workloads.ring_attention.kernels import (
    CudnnKernel,
    FlashKernel,
    FusedKernel,
    MathKernel,
    choose_kernel,
)
from rankgate.workloads.ring_attention.plans import Block, DualChunkPlan, SegmentPlan
from rankgate.workloads.ring_attention.ring import CommTimer, Ring, RingAttention, ring_attention

__all__ = [
    "Block",
    "CommTimer",
    "CudnnKernel",
    "DilatedConfig",
    "DualChunkPlan",
    "FlashKernel",
    "FusedKernel",
    "MathKernel",
    "Ring",
    "RingAttention",
    "SegmentPlan",
    "choose_kernel",
    "dilated_attention",
    "ring_attention",
]
