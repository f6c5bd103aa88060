"""bf16 mixed precision: compute in bfloat16; parameters, gradient reduction and optimizer
state in float32. The reduction dtype is checked by what it does to the gradients."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy
from trainset import UNEVEN

from rankgate.workloads.data import MaxTokensPerRankCollator
from rankgate.workloads.model import build_model, token_loss_sum
from rankgate.workloads.trainer import (
    StrategyOptions,
    TrainConfig,
    adamw,
    create_strategy,
    tiny_forward,
)
from rankgate.workloads.trainer.strategies.torch_native import FSDP2Strategy


class ReducesInBF16(FSDP2Strategy):
    """The bug the checks must catch: gradients reduced in bfloat16."""

    @property
    def mp_policy(self) -> MixedPrecisionPolicy:
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def bf16_representable(grads: list[torch.Tensor]) -> bool:
    """True when every gradient value survives a round trip through bfloat16.

    Gradients computed in bf16 and averaged over ranks in float32 need more mantissa
    bits than bf16 has (the mean of two bf16 numbers of different exponents); averaged
    in bf16 they are rounded back to 8 bits, so every value is representable.
    """
    flat = torch.cat([_local(g).detach().flatten().float() for g in grads])
    return bool(torch.equal(flat.to(torch.bfloat16).float(), flat))


def accumulate_gradients(strategy) -> list[torch.Tensor]:
    """Forward/backward one packed global batch under ``strategy``; the gradients."""
    model = strategy.prepare(build_model(seed=0), adamw(TrainConfig(lr=1e-3)))
    batch = MaxTokensPerRankCollator(
        64, rank=strategy.rank, world_size=strategy.world_size
    )(UNEVEN)
    scale = strategy.world_size / batch.loss_tokens
    for i, minibatch in enumerate(batch.minibatches):
        minibatch = minibatch.to(strategy.device)
        with strategy.minibatch(last=i == len(batch.minibatches) - 1):
            with strategy.autocast():
                logits = tiny_forward(model, minibatch)
            assert logits.dtype == torch.bfloat16, "the forward did not compute in bf16"
            loss_sum, _ = token_loss_sum(logits, minibatch.labels)
            strategy.backward(loss_sum * scale)
    return [p.grad for p in model.parameters()]


def check_fsdp2_bf16_dtypes(strategy) -> None:
    assert strategy.mp_policy.param_dtype == torch.bfloat16
    assert strategy.mp_policy.reduce_dtype == torch.float32
    grads = accumulate_gradients(strategy)
    params = list(strategy.model.parameters())
    assert {p.dtype for p in params} == {torch.float32}, "sharded parameters must stay fp32"
    assert all(g is not None for g in grads)
    assert {g.dtype for g in grads} == {torch.float32}
    if strategy.world_size > 1:
        assert not bf16_representable(grads), "gradients were reduced in bf16"
    strategy.step()
    for p in params:
        state = strategy.optimizer.state[p]
        assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.float32
    assert {p.dtype for p in strategy.model.parameters()} == {torch.float32}


@pytest.mark.world(2)
@pytest.mark.torch_dist
def test_fsdp2_bf16_keeps_fp32_params_reduction_and_optimizer_state():
    check_fsdp2_bf16_dtypes(create_strategy("fsdp2", StrategyOptions(mixed_precision="bf16")).init())


@pytest.mark.world(2)
@pytest.mark.torch_dist
def test_a_bf16_gradient_reduction_is_caught():
    strategy = ReducesInBF16(StrategyOptions(mixed_precision="bf16")).init()
    grads = accumulate_gradients(strategy)
    assert bf16_representable(grads)  # the check above would fail on this strategy


@pytest.mark.world(2)
@pytest.mark.torch_dist
def test_ddp_bf16_autocast_trains_fp32_weights():
    strategy = create_strategy("ddp", StrategyOptions(mixed_precision="bf16")).init()
    grads = accumulate_gradients(strategy)
    assert {g.dtype for g in grads} == {torch.float32}
    assert not bf16_representable(grads)
    strategy.step()
    assert {p.dtype for p in strategy.model.parameters()} == {torch.float32}


@pytest.mark.gpu
@pytest.mark.world(1, backend="nccl")
def test_fsdp2_bf16_on_one_gpu():
    strategy = create_strategy("fsdp2", StrategyOptions(mixed_precision="bf16")).init()
    assert strategy.device.type == "cuda" and "cuda:nccl" in dist.get_backend_config()
    check_fsdp2_bf16_dtypes(strategy)


@pytest.mark.gpu
@pytest.mark.world(2, backend="nccl")
def test_fsdp2_bf16_on_two_gpus():
    strategy = create_strategy("fsdp2", StrategyOptions(mixed_precision="bf16")).init()
    assert strategy.device.type == "cuda"
    check_fsdp2_bf16_dtypes(strategy)
