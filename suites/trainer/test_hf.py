"""A Hugging Face Llama (tiny config built in code, no download) through the same loop."""

from __future__ import annotations

import pytest
import torch
from trainset import HANDFUL

from rankgate.workloads.data import MaxTokensPerRankCollator
from rankgate.workloads.trainer import TrainConfig, Trainer, create_strategy, hf_forward
from rankgate.workloads.trainer.hf import build_hf_model, hf_unavailable_reason

_WHY = hf_unavailable_reason()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=str(_WHY))

HF_STEPS = 40
HF_LOSS = 0.1


@pytest.mark.unit
def test_packed_rows_compute_what_the_samples_compute_alone():
    model = build_hf_model(seed=0)
    (packed,) = MaxTokensPerRankCollator(96, rank=0, world_size=1)(HANDFUL).minibatches
    with torch.no_grad():
        together = hf_forward(model, packed)
        alone = torch.cat(
            [model(input_ids=torch.tensor([s.input_ids])).logits for s in HANDFUL], dim=1
        )
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-5)


def overfit_hf(strategy_name: str) -> list[float]:
    strategy = create_strategy(strategy_name).init()
    config = TrainConfig(batch_size=4, max_tokens_per_rank=48, lr=1e-2)
    trainer = Trainer(strategy, build_hf_model(seed=0), HANDFUL, config, forward=hf_forward)
    return [r.loss for r in trainer.train(HF_STEPS)]


@pytest.mark.unit
def test_hf_model_overfits_in_one_process():
    losses = overfit_hf("local")
    assert losses[0] > 5.0 and losses[-1] < HF_LOSS, losses


@pytest.mark.world(2)
@pytest.mark.torch_dist
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_hf_model_overfits_on_two_ranks(strategy):
    losses = overfit_hf(strategy)
    assert losses[0] > 5.0 and losses[-1] < HF_LOSS, losses


@pytest.mark.gpu
@pytest.mark.world(1, backend="nccl")
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_hf_model_overfits_on_a_gpu(strategy):
    losses = overfit_hf(strategy)
    assert losses[0] > 5.0 and losses[-1] < HF_LOSS, losses
