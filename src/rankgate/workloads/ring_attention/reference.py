"""Single-process attention: the degree-1 baselines the ring is checked against.

Written independently of the ring (masks built from global positions, PyTorch's own
``scaled_dot_product_attention`` where it applies), so a shared mistake cannot hide.
Shapes as in :mod:`.kernels`: (batch, heads, seq, head_dim), grouped-query allowed.
"""

from __future__ import annotations

from itertools import pairwise

import torch
import torch.nn.functional as F


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool) -> torch.Tensor:
    """Causal or full attention over whole sequences."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def varlen_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens, *, causal: bool
) -> torch.Tensor:
    """Packed (THD) sequences, batch 1, tokens along dim 2: each attends only within itself."""
    bounds = [int(b) for b in (cu_seqlens.tolist() if torch.is_tensor(cu_seqlens) else cu_seqlens)]
    parts = [
        attention(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], causal=causal)
        for a, b in pairwise(bounds)
    ]
    return torch.cat(parts, dim=2)


def masked_attention(q, k, v, allowed: torch.Tensor) -> torch.Tensor:
    """Attention where ``allowed`` (heads, seq_q, seq_k) says which keys each query sees;
    a query that sees none gets zeros."""
    h, d = q.shape[1], q.shape[3]
    kv_rep = h // k.shape[1]
    kk = k.repeat_interleave(kv_rep, dim=1)
    vv = v.repeat_interleave(kv_rep, dim=1)
    scores = (q @ kk.transpose(-1, -2)) * d**-0.5
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # all-masked rows: NaN -> 0
    return probs @ vv


def dilated_mask(
    seq: int, heads: int, segment_lengths, dilation_rates, *, causal: bool, device=None
) -> torch.Tensor:
    """(heads, seq, seq): heads split into one group per (segment length w, rate r);
    group g keeps positions p with ``p % r == g % r`` and lets them attend within
    their segment ``p // w`` (and to earlier positions only, when causal)."""
    groups = len(segment_lengths)
    pos = torch.arange(seq, device=device)
    masks = []
    for g, (w, r) in enumerate(zip(segment_lengths, dilation_rates)):
        keep = pos % r == g % r
        seg = pos // w
        allowed = keep[:, None] & keep[None, :] & (seg[:, None] == seg[None, :])
        if causal:
            allowed &= pos[None, :] <= pos[:, None]
        masks.append(allowed.expand(heads // groups, seq, seq))
    return torch.cat(masks)


def dilated_attention_reference(q, k, v, segment_lengths, dilation_rates, *, causal: bool):
    """Dilated attention over whole sequences (the definition :mod:`.dilated` shards)."""
    allowed = dilated_mask(q.shape[2], q.shape[1], segment_lengths, dilation_rates,
                           causal=causal, device=q.device)  # fmt: skip
    return masked_attention(q, k, v, allowed)
