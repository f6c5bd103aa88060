"""The training data pipeline: JSONL samples, an infinite distributed sampler, packing.

Main API: :class:`JsonlDataset` (one ``{"input_ids": [...], "labels": [...]}`` object a
line; errors name the file and line), :class:`InfiniteSampler` (the same permutation on
every rank for a seed and epoch, disjoint per-rank shards, never ends, resumable at any
position) and :class:`MaxTokensPerRankCollator` (a global batch -> this rank's packed
minibatches, with the loss-token count of the whole batch so the loss is normalised
over all ranks).
"""

from rankgate.workloads.data.collator import (
    IGNORE_INDEX,
    MaxTokensPerRankCollator,
    PackedMinibatch,
    RankBatch,
)
from rankgate.workloads.data.jsonl import DatasetError, JsonlDataset, Sample
from rankgate.workloads.data.sampler import InfiniteSampler

__all__ = [
    "IGNORE_INDEX",
    "DatasetError",
    "InfiniteSampler",
    "JsonlDataset",
    "MaxTokensPerRankCollator",
    "PackedMinibatch",
    "RankBatch",
    "Sample",
]
