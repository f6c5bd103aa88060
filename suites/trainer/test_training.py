"""The mini trainer: overfitting, gradient accumulation, global loss normalisation,
clipping and bit-identical resume from a torch.distributed.checkpoint checkpoint."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from trainset import HANDFUL, OVERFIT_LOSS, UNEVEN, overfit

from rankgate.workloads.data import MaxTokensPerRankCollator
from rankgate.workloads.model import build_model
from rankgate.workloads.trainer import (
    StrategyOptions,
    TrainConfig,
    Trainer,
    create_strategy,
    tiny_forward,
    train_step,
)


def full_state(model) -> dict[str, torch.Tensor]:
    """Every parameter, unsharded, by name (DDP's module. prefix removed), on the CPU."""
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {k: v.detach().cpu().clone() for k, v in state.items()}


# --- overfitting ---------------------------------------------------------------------


@pytest.mark.unit
def test_overfit_one_process():
    losses = overfit("local")
    assert losses[0] > 5.0
    assert losses[-1] < OVERFIT_LOSS, losses


@pytest.mark.world(2)
@pytest.mark.torch_dist
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_overfit_two_ranks(strategy):
    losses = overfit(strategy)
    assert losses[0] > 5.0
    assert losses[-1] < OVERFIT_LOSS, losses


# --- gradient accumulation and loss normalisation -------------------------------------


def sgd_step(strategy_name: str, cap: int, per_rank_normalisation: bool = False):
    """One SGD(lr=1) step on UNEVEN; returns (updated full state, minibatches, grad norm).

    With lr 1 the update is the gradient itself, so states compare gradients."""
    strategy = create_strategy(strategy_name).init()
    strategy.prepare(build_model(seed=0), lambda p: torch.optim.SGD(p, lr=1.0))
    collator = MaxTokensPerRankCollator(cap, rank=strategy.rank, world_size=strategy.world_size)
    batch = collator(UNEVEN)
    if per_rank_normalisation:  # the mistake: each rank divides by its own token count
        mine = sum(mb.loss_tokens for mb in batch.minibatches)
        batch = dataclasses.replace(batch, loss_tokens=mine * strategy.world_size)
    result = train_step(strategy, batch, tiny_forward)
    return full_state(strategy.model), result.minibatches, result.grad_norm


def _reference():
    state, minibatches, norm = sgd_step("local", cap=256)
    assert minibatches == 1  # the whole batch in one row: no accumulation
    return state, norm


# The reference runs on the CPU; on GPUs the same float32 arithmetic goes through other
# kernels (summation orders), which differ in the last bits, never by 1e-4.
SAME_DEVICE = {"rtol": 1e-5, "atol": 1e-6}
CROSS_DEVICE = {"rtol": 1e-4, "atol": 1e-5}


def _tolerance() -> dict:
    on_gpu = dist.is_initialized() and "nccl" in str(dist.get_backend())
    return CROSS_DEVICE if on_gpu else SAME_DEVICE


def _assert_same_update(state, reference):
    for name, tensor in reference.items():
        torch.testing.assert_close(state[name], tensor, msg=name, **_tolerance())


@pytest.mark.unit
def test_accumulating_minibatches_equals_one_big_batch():
    reference, norm = _reference()
    state, minibatches, accumulated_norm = sgd_step("local", cap=32)
    assert minibatches >= 5
    _assert_same_update(state, reference)
    assert accumulated_norm == pytest.approx(norm, rel=1e-5)


@pytest.mark.world(2)
@pytest.mark.torch_dist
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_ranks_with_accumulation_equal_one_process(strategy):
    reference, norm = _reference()
    state, minibatches, two_rank_norm = sgd_step(strategy, cap=32)
    assert minibatches >= 3
    _assert_same_update(state, reference)
    assert two_rank_norm == pytest.approx(norm, rel=_tolerance()["rtol"])


@pytest.mark.world(2)
@pytest.mark.torch_dist
def test_per_rank_normalisation_would_be_caught():
    # The check above must be able to fail: normalising by each rank's own tokens
    # weights the ranks' tokens unequally and changes the gradient.
    reference, _ = _reference()
    state, _, _ = sgd_step("ddp", cap=32, per_rank_normalisation=True)
    with pytest.raises(AssertionError):
        _assert_same_update(state, reference)


# --- clipping ------------------------------------------------------------------------


@pytest.mark.world(2)
@pytest.mark.torch_dist
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_clipping_bounds_the_global_norm(strategy):
    before = full_state(build_model(seed=0))
    _, unclipped_norm = _reference()
    s = create_strategy(strategy, StrategyOptions(max_grad_norm=0.1)).init()
    s.prepare(build_model(seed=0), lambda p: torch.optim.SGD(p, lr=1.0))
    batch = MaxTokensPerRankCollator(32, rank=s.rank, world_size=s.world_size)(UNEVEN)
    result = train_step(s, batch, tiny_forward)
    assert unclipped_norm > 0.3
    # Reported before clipping.
    assert result.grad_norm == pytest.approx(unclipped_norm, rel=_tolerance()["rtol"])
    after = full_state(s.model)
    update = torch.cat([(after[k] - before[k]).flatten() for k in before])
    assert update.norm().item() == pytest.approx(0.1, rel=1e-4)  # the global norm, all shards


# --- checkpoints ---------------------------------------------------------------------


def resume_is_bit_identical(strategy_name: str, path) -> None:
    config = TrainConfig(batch_size=4, max_tokens_per_rank=40, lr=3e-3)

    def trainer(seed: int) -> Trainer:
        return Trainer(create_strategy(strategy_name).init(), build_model(seed=seed), UNEVEN, config)

    straight = trainer(seed=0)
    straight.train(3)
    straight.save(path)
    expected = straight.train(2)
    # A fresh run from other weights: everything it needs must come from the checkpoint.
    resumed = trainer(seed=1)
    resumed.load(path)
    assert (resumed.step, resumed.sampler.position) == (3, 12)
    got = resumed.train(2)
    assert [r.loss for r in got] == [r.loss for r in expected]
    assert [r.grad_norm for r in got] == [r.grad_norm for r in expected]
    mine, theirs = full_state(resumed.strategy.model), full_state(straight.strategy.model)
    assert mine.keys() == theirs.keys()
    different = [k for k in mine if not torch.equal(mine[k], theirs[k])]
    assert not different, f"parameters differ after resume: {different}"


@pytest.mark.unit
def test_resume_one_process_is_bit_identical(tmp_path):
    resume_is_bit_identical("local", tmp_path / "ckpt")


@pytest.mark.world(2)
@pytest.mark.torch_dist
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_resume_two_ranks_is_bit_identical(strategy, dist_tmp_path):
    resume_is_bit_identical(strategy, dist_tmp_path / "ckpt")


@pytest.mark.unit
def test_loading_a_missing_checkpoint_names_it(tmp_path):
    trainer = Trainer(create_strategy("local").init(), build_model(), HANDFUL, TrainConfig())
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at .*nowhere"):
        trainer.load(tmp_path / "nowhere")


@pytest.mark.unit
def test_a_batch_without_targets_is_refused():
    strategy = create_strategy("local").init()
    strategy.prepare(build_model(), lambda p: torch.optim.SGD(p, lr=1.0))
    batch = MaxTokensPerRankCollator(8, rank=0, world_size=1)(UNEVEN[:1])  # 31 tokens > 8
    with pytest.raises(ValueError, match="the global batch has no targets"):
        train_step(strategy, batch, tiny_forward)
