"""Max-tokens-per-rank collation: a global batch -> this rank's packed minibatches.

Every rank receives the same global batch (the sampler with ``world_size=1``) and
packs it identically (``rankgate.workloads.packing``), then builds only its own
minibatches. Samples longer than the cap are dropped and counted. Each minibatch is
one row of concatenated samples: labels are shifted within each sample (no target
crosses into the next sample), position ids restart at 0 per sample and document ids
say which sample a token belongs to (for a block-diagonal causal mask). A rank with
no sample in a minibatch gets a one-token dummy whose label is ignored, so it still
joins the minibatch's collectives.

The loss is normalised over all ranks: ``RankBatch.loss_tokens`` counts the targets of
the whole global batch, so dividing each minibatch's summed loss by it (times the
world size, which DDP/FSDP's gradient averaging divides out again) gives the same
gradient as one process training on the whole batch, however unevenly the tokens fall
across ranks and minibatches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rankgate.workloads.data.jsonl import IGNORE_INDEX, Sample
from rankgate.workloads.data.sampler import check_rank
from rankgate.workloads.packing import PADDING, pack


@dataclass(frozen=True, slots=True)
class PackedMinibatch:
    """One row of packed samples for one rank; tensors are (1, tokens)."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    """Next-token targets, IGNORE_INDEX where there is none."""
    position_ids: torch.Tensor
    """0, 1, ... within each sample."""
    document_ids: torch.Tensor
    """Which sample of the row each token belongs to (0, 1, ...)."""
    loss_tokens: int
    """Targets in this minibatch."""
    sample_indices: tuple[int, ...]
    """Indices into the global batch; () for the dummy."""

    @property
    def is_dummy(self) -> bool:
        return not self.sample_indices

    def to(self, device: torch.device | str) -> PackedMinibatch:
        return PackedMinibatch(
            self.input_ids.to(device),
            self.labels.to(device),
            self.position_ids.to(device),
            self.document_ids.to(device),
            self.loss_tokens,
            self.sample_indices,
        )


@dataclass(frozen=True, slots=True)
class RankBatch:
    """What one rank runs for one optimizer step."""

    minibatches: tuple[PackedMinibatch, ...]
    """The same number on every rank (gradient accumulation steps)."""
    loss_tokens: int
    """Targets in the whole global batch, over all ranks: the loss normaliser."""
    dropped: int
    """Samples of the global batch longer than the cap, left out."""
    samples: int
    """Samples of the global batch that were packed (on all ranks)."""


def shifted_targets(sample: Sample) -> list[int]:
    """``labels`` moved one to the left: position i predicts token i + 1 of the same sample."""
    return [*sample.labels[1:], IGNORE_INDEX]


class MaxTokensPerRankCollator:
    """Callable: ``collator(global_batch) -> RankBatch`` for this rank."""

    def __init__(
        self,
        max_tokens_per_rank: int,
        *,
        rank: int,
        world_size: int,
        algorithm: str = "lpt",
        pad_token_id: int = 0,
    ) -> None:
        if max_tokens_per_rank < 1:
            raise ValueError(f"max_tokens_per_rank must be >= 1, got {max_tokens_per_rank}")
        check_rank(rank, world_size)
        self.max_tokens_per_rank = max_tokens_per_rank
        self.rank = rank
        self.world_size = world_size
        self.algorithm = algorithm
        self.pad_token_id = pad_token_id

    def __call__(self, batch: list[Sample]) -> RankBatch:
        kept = [s for s in batch if len(s) <= self.max_tokens_per_rank]
        packing = pack([len(s) for s in kept], self.max_tokens_per_rank, self.world_size,
                       self.algorithm)  # fmt: skip
        targets = [shifted_targets(s) for s in kept]
        loss_tokens = sum(t != IGNORE_INDEX for row in targets for t in row)
        minibatches = tuple(
            self._dummy() if slot == (PADDING,) else self._row(kept, targets, slot)
            for slot in packing.for_rank(self.rank)
        )
        return RankBatch(minibatches, loss_tokens, len(batch) - len(kept), len(kept))

    def _row(self, kept: list[Sample], targets: list[list[int]], slot) -> PackedMinibatch:
        ids, labels, positions, documents = [], [], [], []
        for document, index in enumerate(slot):
            sample = kept[index]
            ids.extend(sample.input_ids)
            labels.extend(targets[index])
            positions.extend(range(len(sample)))
            documents.extend([document] * len(sample))
        count = sum(t != IGNORE_INDEX for t in labels)
        return PackedMinibatch(
            *(torch.tensor([x], dtype=torch.long) for x in (ids, labels, positions, documents)),
            loss_tokens=count,
            sample_indices=tuple(slot),
        )

    def _dummy(self) -> PackedMinibatch:
        one = torch.zeros(1, 1, dtype=torch.long)
        return PackedMinibatch(
            one + self.pad_token_id, one + IGNORE_INDEX, one, one, loss_tokens=0, sample_indices=()
        )
