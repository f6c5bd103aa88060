"""The trainer on GPUs: overfitting with each strategy, in float32 and bf16.

The world(2) tests of the other files run on NCCL too wherever two GPUs are visible
(backend "auto"); these add one-GPU runs and DeepSpeed with bf16.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from trainset import OVERFIT_LOSS, overfit

from rankgate.workloads.trainer import StrategyOptions
from rankgate.workloads.trainer.strategies import unavailable_reason

pytestmark = pytest.mark.gpu

STRATEGIES = [
    pytest.param("ddp", {}, marks=pytest.mark.torch_dist, id="ddp"),
    pytest.param("fsdp2", {}, marks=pytest.mark.torch_dist, id="fsdp2"),
    *(
        pytest.param(
            "deepspeed",
            {"zero_stage": stage},
            marks=[
                pytest.mark.deepspeed_dist,
                pytest.mark.skipif(
                    unavailable_reason("deepspeed") is not None,
                    reason=str(unavailable_reason("deepspeed")),
                ),
            ],
            id=f"zero{stage}",
        )
        for stage in (1, 2, 3)
    ),
]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_overfit_on_one_gpu_without_a_process_group():
    losses = overfit("local", device="cuda")
    assert losses[-1] < OVERFIT_LOSS, losses


def _overfit_on_gpus(name: str, kwargs: dict, precision: str | None) -> None:
    assert "cuda:nccl" in dist.get_backend_config()  # in place the group also serves CPU tensors
    losses = overfit(name, StrategyOptions(mixed_precision=precision), **kwargs)
    assert losses[0] > 5.0
    # bf16 rounds the loss's last digits; the memorisation is as fast.
    assert losses[-1] < (OVERFIT_LOSS if precision is None else 2 * OVERFIT_LOSS), losses


@pytest.mark.world(1, backend="nccl")
@pytest.mark.parametrize("precision", [None, "bf16"])
@pytest.mark.parametrize(("name", "kwargs"), STRATEGIES)
def test_overfit_one_gpu(name, kwargs, precision):
    _overfit_on_gpus(name, kwargs, precision)


@pytest.mark.world(2, backend="nccl")
@pytest.mark.parametrize("precision", [None, "bf16"])
@pytest.mark.parametrize(("name", "kwargs"), STRATEGIES)
def test_overfit_two_gpus(name, kwargs, precision):
    _overfit_on_gpus(name, kwargs, precision)
