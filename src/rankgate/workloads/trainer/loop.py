"""The mini trainer: data pipeline + strategy + step loop + checkpoints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rankgate.workloads.data.collator import MaxTokensPerRankCollator, RankBatch
from rankgate.workloads.trainer import checkpoint
from rankgate.workloads.trainer.forward import Forward, tiny_forward
from rankgate.workloads.trainer.step import StepResult, train_step
from rankgate.workloads.trainer.strategies.base import Strategy, StrategyError


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainConfig:
    """What to train on and how fast."""

    batch_size: int = 8
    """Samples per global batch (one optimizer step), shared out over the ranks."""
    max_tokens_per_rank: int = 256
    """Cap of one packed minibatch row; a batch that does not fit takes more minibatches."""
    lr: float = 3e-3
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    seed: int = 0
    """Seed of the data order (the model's seed is the caller's)."""
    packing: str = "lpt"
    """``lpt`` or ``greedy``."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_tokens_per_rank < 1:
            raise ValueError(f"max_tokens_per_rank must be >= 1, got {self.max_tokens_per_rank}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def adamw(config: TrainConfig):
    """The optimizer factory the trainer hands to ``Strategy.prepare``."""

    def make(params):
        # foreach=False: the same kernels on every run, so resumed steps are bit-identical.
        return torch.optim.AdamW(
            params, lr=config.lr, weight_decay=config.weight_decay, foreach=False
        )

    return make


class Trainer:
    """Trains ``model`` on ``dataset`` (samples with ``input_ids``/``labels``) with ``strategy``.

    Every rank draws the same global batch and keeps its packed share (see
    ``rankgate.workloads.data.collator``); the strategy must be initialised.
    """

    def __init__(
        self,
        strategy: Strategy,
        model: nn.Module,
        dataset,
        config: TrainConfig,
        forward: Forward = tiny_forward,
    ) -> None:
        self.strategy = strategy
        self.config = config
        self.dataset = dataset
        self.forward = forward
        self.model = strategy.prepare(model, adamw(config))
        self.sampler = strategy.sampler(len(dataset), seed=config.seed, shard=False)
        self.collator = MaxTokensPerRankCollator(
            config.max_tokens_per_rank,
            rank=strategy.rank,
            world_size=strategy.world_size,
            algorithm=config.packing,
        )
        self.step = 0
        """Optimizer steps taken."""

    def next_batch(self) -> RankBatch:
        indices = self.sampler.take(self.config.batch_size)
        return self.collator([self.dataset[i] for i in indices])

    def train(self, steps: int) -> list[StepResult]:
        results = []
        for _ in range(steps):
            results.append(train_step(self.strategy, self.next_batch(), self.forward))
            self.step += 1
        return results

    # -- checkpoints ------------------------------------------------------------------

    def _torch_state(self) -> tuple[nn.Module, torch.optim.Optimizer]:
        if self.strategy.name == "deepspeed":
            raise StrategyError(
                "deepspeed: the trainer's checkpoints go through torch.distributed.checkpoint, "
                "which DeepSpeed's engine does not take; use engine.save_checkpoint()"
            )
        return self.strategy.model, self.strategy.optimizer

    def save(self, path: str | Path) -> None:
        """A checkpoint of model, optimizer, step and data position (a collective)."""
        model, optimizer = self._torch_state()
        extra = {"step": self.step, "sampler_position": self.sampler.position}
        checkpoint.save(path, model, optimizer, extra)

    def load(self, path: str | Path) -> None:
        """Resume from :meth:`save`'s checkpoint: the next step is the one that followed it."""
        model, optimizer = self._torch_state()
        extra = checkpoint.load(path, model, optimizer, {"step": 0, "sampler_position": 0})
        self.step = int(extra["step"])
        self.sampler.position = int(extra["sampler_position"])
