"""Dilated attention (segment lengths and dilation rates) over the same ring.

The heads are split into one group per pair (segment length ``w``, dilation rate
``r``). Group ``g`` keeps the positions ``p`` with ``p % r == g % r`` and lets each
attend to the kept positions of its own segment ``p // w`` (earlier ones only, when
causal); the other positions get zeros from that group. The groups together cover
short-range detail and long-range context at a cost linear in the sequence length.

Sharding is contiguous: rank ``i`` holds positions ``[i·n, (i+1)·n)``. A group's kept
positions form a subsequence sharded the same way (``n / r`` rows per rank) whose
segments are ``w / r`` rows long, so each group is ring attention on that subsequence
with a :class:`.plans.SegmentPlan`: blocks only where a segment spans both shards,
nothing sent for nothing (a segment shorter than a shard needs no other rank's keys,
and the plan asks for none).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from rankgate.workloads.ring_attention.kernels import BlockKernel, choose_kernel
from rankgate.workloads.ring_attention.plans import SegmentPlan
from rankgate.workloads.ring_attention.ring import CommTimer, Ring, _RingAttention


@dataclass(frozen=True, kw_only=True, slots=True)
class DilatedConfig:
    """One (segment length, dilation rate) pair per head group."""

    segment_lengths: tuple[int, ...]
    """Segment length ``w`` of each group; a multiple of its rate."""
    dilation_rates: tuple[int, ...]
    """Dilation rate ``r`` of each group: every ``r``-th position is kept."""
    causal: bool = False
    """Attend only to earlier positions within a segment."""

    def __post_init__(self) -> None:
        w, r = self.segment_lengths, self.dilation_rates
        if not w or len(w) != len(r):
            raise ValueError(
                f"segment_lengths {w} and dilation_rates {r} must be non-empty and of equal length"
            )
        for seg, rate in zip(w, r):
            if rate < 1 or seg < 1 or seg % rate:
                raise ValueError(
                    f"segment length {seg} must be a positive multiple of its dilation rate {rate}"
                )

    def check(self, seq: int, local: int, heads: int, kv_heads: int) -> None:
        """Refuse shapes the groups cannot split evenly, naming the arithmetic."""
        groups = len(self.segment_lengths)
        if heads % groups or kv_heads % groups:
            raise ValueError(
                f"heads={heads} and kv_heads={kv_heads} must both be multiples of the "
                f"{groups} head groups (one per segment length)"
            )
        for seg, rate in zip(self.segment_lengths, self.dilation_rates):
            if seq % seg or local % rate:
                raise ValueError(
                    f"sequence length {seq} must be a multiple of segment length {seg}, and "
                    f"each rank's {local} positions a multiple of dilation rate {rate}: pad the "
                    "sequence to a multiple of cp x the largest segment length"
                )


def dilated_attention(  # q, k, v, then keyword options with defaults (a public entry)
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    config: DilatedConfig,
    *,
    group: dist.ProcessGroup | None = None,
    scale: float | None = None,
    kernel: str | BlockKernel = "auto",
    timer: CommTimer | None = None,
) -> torch.Tensor:
    """This rank's contiguous shard (batch, heads, n, head_dim) of dilated attention."""
    ring = Ring(group)
    b, h, n, d = q.shape
    hk = k.shape[1]
    config.check(n * ring.size, n, h, hk)
    block_kernel = choose_kernel(q, kernel) if isinstance(kernel, str) else kernel
    scale = d**-0.5 if scale is None else scale
    groups = len(config.segment_lengths)
    outs = []
    for g, (seg, rate) in enumerate(zip(config.segment_lengths, config.dilation_rates)):
        hq = slice(g * h // groups, (g + 1) * h // groups)
        hkv = slice(g * hk // groups, (g + 1) * hk // groups)
        offset = g % rate
        # every shard starts at a multiple of the rate, so local index i is kept iff
        # i % rate == offset
        sub = (t[:, heads, offset::rate] for t, heads in ((q, hq), (k, hkv), (v, hkv)))
        plan = SegmentPlan(n // rate, seg // rate, config.causal)
        kept = _RingAttention.apply(*sub, plan, ring, block_kernel, scale, 1, timer)
        full = kept.new_zeros(b, kept.shape[1], n // rate, rate, d)
        full[:, :, :, offset] = kept
        outs.append(full.reshape(b, kept.shape[1], n, d))
    return torch.cat(outs, dim=1)
