"""Context-parallel sharding: which tokens of which sequences each rank holds.

Main API:

- :class:`DualChunkSharding` (``.bshd(seq_len, cp)``, ``.thd(cu_seqlens, cp)``):
  load-balanced dual chunks (rank ``r`` holds chunks ``r`` and ``2·cp-1-r`` of every
  sequence); ``indices(rank)``, ``positions(rank)``, ``shard(x, rank, dim)``,
  ``unshard(shards, dim)``, ``local_cu_seqlens``.
- :func:`pad_to_multiple`, :func:`padded_length`, :func:`pack_sequences` (THD with
  per-sequence padding, labels and positions), :func:`next_token_labels` (BSHD).

Ring attention over these shards: :mod:`rankgate.workloads.ring_attention`.
"""

from rankgate.workloads.cp.padding import (
    IGNORE_INDEX,
    PackedBatch,
    next_token_labels,
    pack_sequences,
    pad_to_multiple,
    padded_length,
)
from rankgate.workloads.cp.sharding import DualChunkSharding

__all__ = [
    "IGNORE_INDEX",
    "DualChunkSharding",
    "PackedBatch",
    "next_token_labels",
    "pack_sequences",
    "pad_to_multiple",
    "padded_length",
]
