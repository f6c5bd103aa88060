"""DDP and FSDP2 against one process after k optimizer steps, and FSDP2's mixed precision.

Each rank trains on its rows of a global batch; its loss is its sum of token losses
over the global count of labelled tokens, times the world size (DDP and FSDP2 average
gradients over ranks), so the averaged gradient is the one-process gradient of the
token-weighted mean. After K steps of SGD with momentum every parameter must equal one
process's to fp32 rounding. (Not AdamW here: it divides by the root of the second
moment, so for a gradient near its eps the order of a reduction's additions, 1e-7
relative, moves the update by up to the learning rate; an SGD update is linear in the
gradient, so any drift beyond rounding is a real difference. AdamW's sharded states
are checked in the mixed-precision test.)

Mixed precision: ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``. The
sharded parameters, their gradients and AdamW's states stay fp32 while the forward
runs in bf16 (checked on every linear layer's weight and output). The reduction in
fp32 is checked by value: the reduced gradient must equal, to fp32 rounding, the fp32
mean of each rank's bf16 gradient (computed here with a bf16 copy of the model). A
reduction in bf16 rounds that mean to 8 significant bits and fails the same check;
``test_fsdp2_bf16_reduction_is_caught`` shows it does.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from parallelcase import CPU_MULTI, GPU_WORLDS
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from rankgate.parity import Tolerance, assert_parity, compare, verdict
from rankgate.workloads.cp import next_token_labels
from rankgate.workloads.model import build_model, token_loss_sum

STEPS = 3
ROWS_PER_RANK = 2
SEQ = 16
MIXED = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
FP32_REDUCTION = Tolerance(atol=1e-9, rtol=1e-6, max_rel_l2=1e-6)
"""fp32 sums of bf16 values: exact up to the order of addition (a few fp32 ulps)."""


def _batch(step: int, world: int, device) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + step)
    return torch.randint(0, 256, (world * ROWS_PER_RANK, SEQ), generator=g).to(device)


def _loss(model, tokens, count, scale=1.0):
    loss_sum, _ = token_loss_sum(model(tokens), next_token_labels(tokens))
    return loss_sum / count * scale


def _sgd(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _one_process(world: int, device) -> dict[str, torch.Tensor]:
    model = build_model(seed=0).to(device)
    optimizer = _sgd(model.parameters())
    for step in range(STEPS):
        tokens = _batch(step, world, device)
        count = (next_token_labels(tokens) != -100).sum()
        _loss(model, tokens, count).backward()
        optimizer.step()
        optimizer.zero_grad()
    return {n: p.detach() for n, p in model.named_parameters()}


def _train(model, rank, world, device, make_optimizer=_sgd) -> torch.optim.Optimizer:
    optimizer = make_optimizer(model.parameters())
    for step in range(STEPS):
        tokens = _batch(step, world, device)
        count = (next_token_labels(tokens) != -100).sum()
        mine = tokens[rank * ROWS_PER_RANK : (rank + 1) * ROWS_PER_RANK]
        _loss(model, mine, count, scale=world).backward()
        optimizer.step()
        optimizer.zero_grad()
    return optimizer


def _fsdp(policy: MixedPrecisionPolicy | None = None, device="cpu") -> nn.Module:
    model = build_model(seed=0).to(device)
    # On the device's own mesh: fully_shard's default mesh takes the machine's
    # accelerator, which moved a gloo test's CPU shards to a GPU on GPU hosts.
    mesh = init_device_mesh(torch.device(device).type, (dist.get_world_size(),))
    kwargs = {"mesh": mesh, "mp_policy": policy} if policy else {"mesh": mesh}
    for block in model.blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def _full(param: torch.Tensor) -> torch.Tensor:
    return param.full_tensor() if hasattr(param, "full_tensor") else param


@pytest.mark.parametrize("world", CPU_MULTI)
def test_ddp_matches_one_process_after_k_steps(world, rank, world_size, device):
    expected = _one_process(world_size, device)
    model = DistributedDataParallel(build_model(seed=0).to(device))
    _train(model, rank, world_size, device)
    actual = {n.removeprefix("module."): p.detach() for n, p in model.named_parameters()}
    assert_parity(actual, expected, what=f"DDP, {STEPS} SGD steps, world {world_size}")


def _check_fsdp2_fp32(rank, world_size, device):
    expected = _one_process(world_size, device)
    model = _fsdp(device=device)
    _train(model, rank, world_size, device)
    actual = {n: _full(p.detach()) for n, p in model.named_parameters()}
    assert_parity(actual, expected, what=f"FSDP2, {STEPS} SGD steps, world {world_size}")


@pytest.mark.parametrize("world", CPU_MULTI)
def test_fsdp2_matches_one_process_after_k_steps(world, rank, world_size, device):
    _check_fsdp2_fp32(rank, world_size, device)


@pytest.mark.parametrize("world", GPU_WORLDS[:1])
def test_fsdp2_matches_one_gpu_after_k_steps(world, rank, world_size, device):
    _check_fsdp2_fp32(rank, world_size, device)


@pytest.mark.parametrize("world", CPU_MULTI[:1])
def test_fsdp2_mixed_precision_keeps_fp32_state_and_computes_in_bf16(world, rank, world_size, device):
    model = _fsdp(MIXED, device)
    seen: dict[str, tuple[torch.dtype, torch.dtype]] = {}

    def record(module, inputs, output, name):
        seen[name] = (module.weight.dtype, output.dtype)

    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(lambda m, i, o, name=name: record(m, i, o, name))
    optimizer = _train(model, rank, world_size, device,
                       lambda params: torch.optim.AdamW(params, lr=1e-3))  # fmt: skip

    assert len(seen) == 1 + 7 * len(model.blocks)  # head + 7 linears per block
    for name, (weight_dtype, output_dtype) in seen.items():
        assert (weight_dtype, output_dtype) == (torch.bfloat16, torch.bfloat16), name
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32 and p.to_local().dtype == torch.float32, name
    tokens = _batch(0, world_size, device)[:ROWS_PER_RANK]
    _loss(model, tokens, 1).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.to_local().dtype == torch.float32, name
        state = optimizer.state[p]
        assert {k: v.dtype for k, v in state.items() if k != "step"} == {
            "exp_avg": torch.float32, "exp_avg_sq": torch.float32}, name  # fmt: skip


def _reduction_report(policy: MixedPrecisionPolicy, rank, world_size, device):
    """FSDP2's reduced gradient against the fp32 mean of every rank's bf16 gradient."""
    tokens = _batch(0, world_size, device)
    count = (next_token_labels(tokens) != -100).sum()
    mine = tokens[rank * ROWS_PER_RANK : (rank + 1) * ROWS_PER_RANK]

    model = _fsdp(policy, device)
    _loss(model, mine, count, scale=world_size).backward()
    actual = {n: _full(p.grad) for n, p in model.named_parameters()}

    # what each rank's bf16 forward/backward produces before any reduction
    local = build_model(seed=0).to(device=device, dtype=torch.bfloat16)
    _loss(local, mine, count, scale=world_size).backward()
    expected = {}
    for name, p in local.named_parameters():
        every = [torch.empty_like(p.grad, dtype=torch.float32) for _ in range(world_size)]
        dist.all_gather(every, p.grad.float())
        expected[name] = torch.stack(every).sum(0) / world_size
    return compare(actual, expected, tolerance=FP32_REDUCTION)


@pytest.mark.parametrize("world", CPU_MULTI)
def test_fsdp2_reduces_gradients_in_fp32(world, rank, world_size, device):
    report = _reduction_report(MIXED, rank, world_size, device)
    result = verdict(report)
    assert result.ok, result.describe(f"FSDP2 {MIXED} gradient reduction") + "\n" + report.describe()


@pytest.mark.parametrize("world", CPU_MULTI[:1])
def test_fsdp2_bf16_reduction_is_caught(world, rank, world_size, device):
    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    report = _reduction_report(bf16, rank, world_size, device)
    assert not verdict(report).ok, "a bf16 gradient reduction passed the fp32-reduction check"
    worst = max(t.rel_l2 for t in report.tensors)
    assert worst > 100 * FP32_REDUCTION.max_rel_l2, report.describe()
