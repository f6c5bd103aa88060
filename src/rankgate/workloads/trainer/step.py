"""One optimizer step over a rank's packed minibatches (gradient accumulation).

Each minibatch's summed loss is divided by the loss-token count of the whole global
batch and multiplied by the world size (the strategies average gradients over ranks),
so the accumulated gradient is that of the mean loss over every target of the global
batch -- the same as one process would compute on it, however the tokens are spread.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rankgate.workloads.data.collator import RankBatch
from rankgate.workloads.model import token_loss_sum
from rankgate.workloads.trainer.forward import Forward
from rankgate.workloads.trainer.strategies.base import Strategy


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one step did, the same on every rank."""

    loss: float
    """Mean loss per target over the global batch (before the update)."""
    grad_norm: float
    """Global gradient norm before clipping."""
    loss_tokens: int
    """Targets in the global batch."""
    minibatches: int
    """Accumulation steps each rank ran."""


def train_step(strategy: Strategy, batch: RankBatch, forward: Forward) -> StepResult:
    """Forward/backward every minibatch of ``batch``, then clip and step once."""
    if batch.loss_tokens == 0:
        raise ValueError(
            "the global batch has no targets (every label is ignored or every sample was "
            "dropped as oversize); raise max_tokens_per_rank or check the labels"
        )
    model = strategy.model
    scale = strategy.world_size / batch.loss_tokens
    total = 0.0
    count = len(batch.minibatches)
    for i, minibatch in enumerate(batch.minibatches):
        minibatch = minibatch.to(strategy.device)
        with strategy.minibatch(last=i == count - 1):
            with strategy.autocast():
                logits = forward(model, minibatch)
            loss_sum, _ = token_loss_sum(logits, minibatch.labels)
            strategy.backward(loss_sum * scale)
        total += float(loss_sum.detach().to(torch.float64))
    grad_norm = strategy.step()
    loss = strategy.all_reduce_sum(total) / batch.loss_tokens
    return StepResult(loss, grad_norm, batch.loss_tokens, count)
