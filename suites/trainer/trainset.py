"""Samples the training tests share: built from seeds, the same in every process."""

from __future__ import annotations

import torch

from rankgate.workloads.data import Sample
from rankgate.workloads.model import build_model
from rankgate.workloads.trainer import StrategyOptions, TrainConfig, Trainer, create_strategy


def random_samples(lengths: list[int], seed: int = 0, vocab: int = 256) -> list[Sample]:
    """Random token sequences; labels are the tokens (every next token is a target)."""
    g = torch.Generator().manual_seed(seed)
    return [
        Sample(tuple(t), tuple(t))
        for t in (torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths)
    ]


HANDFUL = random_samples([24, 24, 24, 24], seed=1)
"""Four random 24-token sequences: memorised in a few dozen steps."""

UNEVEN = random_samples([31, 7, 19, 3, 28, 12, 25, 9, 16, 30, 5, 21], seed=2)
"""A global batch whose tokens fall unevenly on two ranks and several minibatches."""

OVERFIT_STEPS = 30
OVERFIT_LOSS = 0.05
"""Mean next-token loss HANDFUL must fall below in OVERFIT_STEPS steps (from ln 256 = 5.55)."""


def overfit(strategy_name: str, options: StrategyOptions | None = None, **kwargs) -> list[float]:
    """Train the tiny transformer on HANDFUL; the loss of every step."""
    strategy = create_strategy(strategy_name, options, **kwargs).init()
    config = TrainConfig(batch_size=4, max_tokens_per_rank=48, lr=1e-2)
    trainer = Trainer(strategy, build_model(seed=0), HANDFUL, config)
    return [r.loss for r in trainer.train(OVERFIT_STEPS)]
