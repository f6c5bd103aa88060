"""Load-balanced dual-chunk sharding of sequences over a context-parallel group.

Every sequence is cut into ``2·cp`` equal chunks; rank ``r`` holds chunks ``r`` and
``2·cp-1-r`` (one from the front, one from the back), so under a causal mask every
rank has the same amount of attention work. Two layouts:

- **BSHD**: a batch of equal-length sequences, tensors shaped ``(batch, seq, ...)``
  (any dimension can be the sequence one).
- **THD**: packed sequences of different lengths, concatenated along one token
  dimension and delimited by ``cu_seqlens`` (cumulative lengths, starting at 0).
  Each sequence is sharded on its own; a rank's shard is the concatenation of its two
  chunks of every sequence, so its local ``cu_seqlens`` is the global one over ``cp``.

Within a rank's shard, the tokens of one sequence are in increasing global order
(chunk ``r`` then chunk ``2·cp-1-r``): causal masking by local index within a
sequence is causal masking by global position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import torch


@dataclass(frozen=True, slots=True)
class DualChunkSharding:
    """Which tokens each of ``cp`` ranks holds; build with :meth:`bshd` or :meth:`thd`."""

    cp: int
    """Context-parallel degree (ranks sharing each sequence)."""
    cu_seqlens: tuple[int, ...]
    """Sequence boundaries along the sharded dimension: (0, seq) for BSHD."""
    layout: str
    """"bshd" or "thd"."""

    @classmethod
    def bshd(cls, seq_len: int, cp: int) -> DualChunkSharding:
        """Sharding of equal-length sequences of ``seq_len`` tokens."""
        _check_cp(cp)
        if seq_len <= 0 or seq_len % (2 * cp):
            raise ValueError(
                f"sequence length {seq_len} is not a positive multiple of 2*cp={2 * cp}: "
                f"pad it first (rankgate.workloads.cp.pad_to_multiple(x, {2 * cp}, dim=...))"
            )
        return cls(cp=cp, cu_seqlens=(0, seq_len), layout="bshd")

    @classmethod
    def thd(cls, cu_seqlens: Sequence[int] | torch.Tensor, cp: int) -> DualChunkSharding:
        """Sharding of packed sequences delimited by ``cu_seqlens``."""
        _check_cp(cp)
        bounds = _check_cu_seqlens(cu_seqlens)
        for i, (start, end) in enumerate(pairwise(bounds)):
            if (end - start) % (2 * cp):
                raise ValueError(
                    f"sequence {i} has {end - start} tokens (cu_seqlens[{i}]={start}, "
                    f"cu_seqlens[{i + 1}]={end}), not a multiple of 2*cp={2 * cp}: pack with "
                    f"rankgate.workloads.cp.pack_sequences(..., cp={cp}), which pads each sequence"
                )
        return cls(cp=cp, cu_seqlens=bounds, layout="thd")

    @property
    def total(self) -> int:
        """Tokens along the sharded dimension, all ranks together."""
        return self.cu_seqlens[-1]

    @property
    def local_total(self) -> int:
        """Tokens each rank holds."""
        return self.total // self.cp

    @property
    def local_cu_seqlens(self) -> tuple[int, ...]:
        """Sequence boundaries within every rank's shard (the same on every rank)."""
        return tuple(b // self.cp for b in self.cu_seqlens)

    def indices(self, rank: int) -> torch.Tensor:
        """Global token indices rank ``rank`` holds, in its local order."""
        self._check_rank(rank)
        parts = []
        for start, end in pairwise(self.cu_seqlens):
            chunk = (end - start) // (2 * self.cp)
            for c in (rank, 2 * self.cp - 1 - rank):
                parts.append(torch.arange(start + c * chunk, start + (c + 1) * chunk))
        return torch.cat(parts) if parts else torch.empty(0, dtype=torch.long)

    def positions(self, rank: int) -> torch.Tensor:
        """Position of each of the rank's tokens within its own sequence (RoPE's input)."""
        idx = self.indices(rank)
        starts = torch.tensor(self.cu_seqlens[:-1])
        seq = torch.searchsorted(starts, idx, right=True) - 1
        return idx - starts[seq]

    def shard(self, x: torch.Tensor, rank: int, dim: int = 1) -> torch.Tensor:
        """Rank ``rank``'s part of ``x`` along ``dim`` (the sequence or token dimension)."""
        self._check_extent(x, dim)
        return x.index_select(dim, self.indices(rank).to(x.device))

    def unshard(self, shards: Sequence[torch.Tensor], dim: int = 1) -> torch.Tensor:
        """The full tensor from every rank's shard (rank order), inverse of :meth:`shard`."""
        if len(shards) != self.cp:
            raise ValueError(f"unshard needs one shard per rank: got {len(shards)}, cp={self.cp}")
        for r, s in enumerate(shards):
            if s.shape[dim] != self.local_total:
                raise ValueError(
                    f"shard of rank {r} has {s.shape[dim]} tokens along dim {dim}; every rank "
                    f"holds {self.local_total} (total {self.total} / cp {self.cp})"
                )
        stacked = torch.cat(list(shards), dim=dim)
        order = torch.cat([self.indices(r) for r in range(self.cp)]).to(stacked.device)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=order.device)
        return stacked.index_select(dim, inverse)

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.cp:
            raise ValueError(f"rank {rank} is outside 0..{self.cp - 1} (cp={self.cp})")

    def _check_extent(self, x: torch.Tensor, dim: int) -> None:
        if x.shape[dim] != self.total:
            where = "cu_seqlens ends at" if self.layout == "thd" else "the sequence length is"
            raise ValueError(
                f"tensor has {x.shape[dim]} tokens along dim {dim} but {where} {self.total}: "
                "pass the dimension that holds the sequence (dim=...)"
            )


def _check_cp(cp: int) -> None:
    if not isinstance(cp, int) or cp < 1:
        raise ValueError(f"cp={cp!r} must be an integer >= 1 (the context-parallel degree)")


def _check_cu_seqlens(cu_seqlens: Sequence[int] | torch.Tensor) -> tuple[int, ...]:
    if isinstance(cu_seqlens, torch.Tensor):
        if cu_seqlens.dim() != 1 or cu_seqlens.is_floating_point() or cu_seqlens.is_complex():
            raise ValueError(
                f"cu_seqlens must be a 1-D integer tensor, got {cu_seqlens.dim()}-D "
                f"{cu_seqlens.dtype}: cumulative sequence lengths like [0, 8, 20]"
            )
        cu_seqlens = cu_seqlens.tolist()
    bounds = tuple(int(b) for b in cu_seqlens)
    if len(bounds) < 2 or bounds[0] != 0:
        raise ValueError(
            f"cu_seqlens={list(bounds)} must start at 0 and hold at least one sequence, "
            "like [0, 8, 20] for sequences of 8 and 12 tokens"
        )
    for i, (a, b) in enumerate(pairwise(bounds)):
        if b <= a:
            raise ValueError(
                f"cu_seqlens must increase strictly: cu_seqlens[{i}]={a}, cu_seqlens[{i + 1}]={b} "
                "(an empty or negative-length sequence); drop empty sequences before packing"
            )
    return bounds
