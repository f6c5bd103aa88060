"""What every strategy must do: checks that run on every rank of a job.

Each ``check_*`` takes a factory of new, uninitialised strategies and raises
AssertionError when the strategy breaks the interface; it is run on every rank
(by the harness's world marker, a launcher, or Ray Train's workers), so a check may
use collectives through the strategy. The training suite's shared test class runs
each check against every strategy (suites/trainer/test_strategies.py).
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable

import torch

from rankgate.workloads.data.collator import MaxTokensPerRankCollator
from rankgate.workloads.data.jsonl import Sample
from rankgate.workloads.model import build_model, token_loss_sum
from rankgate.workloads.trainer.forward import tiny_forward
from rankgate.workloads.trainer.loop import TrainConfig, adamw
from rankgate.workloads.trainer.step import train_step
from rankgate.workloads.trainer.strategies.base import Strategy, StrategyError

Factory = Callable[[], Strategy]


def _raises(call: Callable[[], object], needle: str) -> None:
    try:
        call()
    except StrategyError as exc:
        assert needle in str(exc), f"StrategyError without {needle!r}: {exc}"
    else:
        raise AssertionError(f"expected a StrategyError mentioning {needle!r}")


def check_identity(make: Factory) -> dict:
    """rank, world, local rank and device are consistent across the ranks."""
    strategy = make().init()
    host = socket.gethostname()
    mine = (strategy.rank, strategy.world_size, strategy.local_rank, strategy.device.type, host)
    everyone = strategy.gather_object(mine)
    world = strategy.world_size
    assert [r for r, *_ in everyone] == list(range(world)), everyone
    assert {w for _, w, *_ in everyone} == {world}, everyone
    # Distinct on each host, not below world: a sub-world of a launch (ranks 2, 3 of a
    # node) keeps the launcher's local ranks, the GPUs its ranks use.
    on_hosts = [(host, local) for _, _, local, _, host in everyone]
    assert all(local >= 0 for _, local in on_hosts), everyone
    assert len(set(on_hosts)) == world, f"two ranks share a local rank on one host: {everyone}"
    assert len({d for *_, d, _ in everyone}) == 1, f"ranks disagree on the device type: {everyone}"
    return {"world": world, "device": strategy.device.type}


def check_errors_before_init_and_on_second_init(make: Factory) -> None:
    strategy = make()
    _raises(lambda: strategy.rank, "call init() first")
    _raises(lambda: strategy.gather_object(1), "call init() first")
    _raises(lambda: strategy.prepare(torch.nn.Linear(1, 1), adamw(TrainConfig())), "init()")
    strategy.init()
    _raises(strategy.init, "init() was called twice")
    _raises(strategy.step, "needs prepare(model, make_optimizer) first")


def check_gather_object(make: Factory) -> None:
    strategy = make().init()
    values = strategy.gather_object({"rank": strategy.rank, "text": "x" * strategy.rank})
    assert values == [{"rank": r, "text": "x" * r} for r in range(strategy.world_size)]
    total = strategy.all_reduce_sum(float(strategy.rank + 1))
    n = strategy.world_size
    assert total == n * (n + 1) / 2


def check_dataloader_shards(make: Factory) -> None:
    """Each rank's batches come from its own shard; together they cover an epoch once."""
    strategy = make().init()
    n = 6 * strategy.world_size  # three batches of two on every rank
    loader = strategy.dataloader(list(range(100, 100 + n)), batch_size=2, seed=3)
    mine = [x for _ in range(3) for x in next(loader)]
    everyone = strategy.gather_object(mine)
    flat = [x for shard in everyone for x in shard]
    assert sorted(flat) == list(range(100, 100 + n)), f"shards overlap or miss: {everyone}"


def _batch(seed: int = 0) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    lengths = [9, 23, 5, 17, 30, 12, 3, 26]
    return [
        Sample(tuple(t), tuple(t))
        for t in (torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths)
    ]


def _reference_loss(batch: list[Sample]) -> float:
    """The first step's loss, as one process computes it on the whole batch."""
    model = build_model(seed=0)
    collated = MaxTokensPerRankCollator(64, rank=0, world_size=1)(batch)
    total = 0.0
    with torch.no_grad():
        for minibatch in collated.minibatches:
            total += float(token_loss_sum(tiny_forward(model, minibatch), minibatch.labels)[0])
    return total / collated.loss_tokens


def check_training_steps(make: Factory, steps: int = 6) -> list[float]:
    """A packed global batch trains: the first loss is the single-process one, the loss
    falls, and every rank ends with the same model."""
    strategy = make().init()
    strategy.prepare(build_model(seed=0), adamw(TrainConfig(lr=1e-2)))
    batch = _batch()
    collator = MaxTokensPerRankCollator(32, rank=strategy.rank, world_size=strategy.world_size)
    losses = [train_step(strategy, collator(batch), tiny_forward).loss for _ in range(steps)]
    assert math.isclose(losses[0], _reference_loss(batch), rel_tol=1e-4), losses[0]
    assert losses[-1] < 0.8 * losses[0], losses
    # Replicas agree: rank 0's first minibatch (every rank can build it) gives the same
    # output everywhere; sharded strategies gather their shards for it, so this compares
    # whole models.
    probe = MaxTokensPerRankCollator(32, rank=0, world_size=strategy.world_size)(batch)
    with torch.no_grad():
        output = tiny_forward(strategy.model, probe.minibatches[0].to(strategy.device))
    everyone = strategy.gather_object((losses, float(output.double().sum())))
    assert all(e[0] == losses for e in everyone), f"ranks saw different losses: {everyone}"
    assert len({e[1] for e in everyone}) == 1, f"the ranks' models differ: {everyone}"
    return losses


def check_shutdown(make: Factory) -> None:
    strategy = make().init()
    strategy.gather_object(None)
    strategy.shutdown()
    _raises(lambda: strategy.rank, "shut down")
    _raises(strategy.init, "create a new one")


CHECKS: dict[str, Callable[[Factory], object]] = {
    "identity": check_identity,
    "errors": check_errors_before_init_and_on_second_init,
    "gather_object": check_gather_object,
    "dataloader_shards": check_dataloader_shards,
    "training_steps": check_training_steps,
    "shutdown": check_shutdown,
}


def run_all(make: Factory) -> dict[str, str | None]:
    """Run every check in order; check name -> None when it passed, else its traceback.

    For runners that start the ranks once for all checks (Ray Train): a check that
    fails on one rank may leave the others waiting in a collective, so a failure stops
    the remaining checks on this rank.
    """
    import traceback

    outcome: dict[str, str | None] = {}
    for name, check in CHECKS.items():
        try:
            check(make)
            outcome[name] = None
        except BaseException:
            outcome[name] = traceback.format_exc()
            break
    return outcome
