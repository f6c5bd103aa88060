"""The strategy interface: how a training loop runs on one or many ranks.

A strategy is created with its options, initialised once (``init``: joins or creates
the process group, picks the device), then wraps a model and makes its optimizer
(``prepare``). Each optimizer step runs one or more minibatches: the forward and
``backward`` of each inside ``with strategy.minibatch(last=...)`` (gradients are
synchronised only on the last one), then ``step`` clips and steps. ``dataloader``
shards a dataset over the ranks, ``gather_object`` collects one value per rank,
``shutdown`` ends it all. Using a strategy before ``init`` or initialising it twice is
a :class:`StrategyError` that says what to do.
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn

from rankgate.errors import RankgateError
from rankgate.launch.env import detect_launch
from rankgate.launch.rankvars import export_torchrun_names
from rankgate.workloads.data.sampler import InfiniteSampler

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


class StrategyError(RankgateError, RuntimeError):
    """A strategy used out of order (before init, twice, after shutdown) or unable to run."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategyOptions:
    """Options every strategy understands."""

    max_grad_norm: float | None = None
    """Clip the global gradient norm to this in ``step``; None: no clipping."""
    mixed_precision: str | None = None
    """None (float32 everywhere) or ``"bf16"``: compute in bfloat16, keep float32
    parameters, gradient reductions and optimizer state."""
    backend: str | None = None
    """Process-group backend when the strategy creates the group (default: nccl on
    GPUs, gloo on the CPU). Ignored when a group exists already."""

    def __post_init__(self) -> None:
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0 or None, got {self.max_grad_norm}")
        if self.mixed_precision not in (None, "bf16"):
            raise ValueError(
                f"mixed_precision must be None or 'bf16', got {self.mixed_precision!r}"
            )


class Strategy(ABC):
    """One way of running the training loop; see the module docstring for the protocol."""

    name: ClassVar[str]

    def __init__(self, options: StrategyOptions | None = None) -> None:
        self.options = options or StrategyOptions()
        self._state = "created"  # created -> initialised -> shut down
        self._rank = self._world_size = self._local_rank = 0
        self._device = torch.device("cpu")
        self.model: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None

    # -- life cycle -----------------------------------------------------------------

    def init(self) -> Strategy:
        """Join the process group (creating it if no one did) and pick the device."""
        if self._state == "initialised":
            raise StrategyError(
                f"{self.name}: init() was called twice; initialise a strategy once and "
                "reuse it (create a new one after shutdown())"
            )
        if self._state == "shut down":
            raise StrategyError(f"{self.name}: this strategy was shut down; create a new one")
        self._rank, self._world_size, self._local_rank, self._device = self._setup()
        self._state = "initialised"
        return self

    @abstractmethod
    def _setup(self) -> tuple[int, int, int, torch.device]:
        """Start or join the job; return (rank, world size, local rank, device)."""

    def shutdown(self) -> None:
        """Release what init() took. The process group is left alone if it was not ours."""
        self._require_init("shutdown()")
        self._teardown()
        self.model = self.optimizer = None
        self._state = "shut down"

    def _teardown(self) -> None:  # noqa: B027 - most strategies have nothing to release
        """Release what _setup took (the default: nothing)."""

    def _require_init(self, what: str) -> None:
        if self._state != "initialised":
            state = "not initialised" if self._state == "created" else "shut down"
            raise StrategyError(
                f"{self.name}: {what} needs an initialised strategy, but it is {state}; "
                "call init() first" + (" on a new strategy" if state == "shut down" else "")
            )

    @property
    def rank(self) -> int:
        self._require_init("rank")
        return self._rank

    @property
    def world_size(self) -> int:
        self._require_init("world_size")
        return self._world_size

    @property
    def local_rank(self) -> int:
        self._require_init("local_rank")
        return self._local_rank

    @property
    def device(self) -> torch.device:
        self._require_init("device")
        return self._device

    # -- training -------------------------------------------------------------------

    def prepare(self, model: nn.Module, make_optimizer: OptimizerFactory) -> nn.Module:
        """Move, wrap and shard ``model``; make its optimizer. Returns the model to call."""
        self._require_init("prepare()")
        if self.model is not None:
            raise StrategyError(f"{self.name}: prepare() was called twice; one model a strategy")
        self.model, self.optimizer = self._prepare(model, make_optimizer)
        return self.model

    @abstractmethod
    def _prepare(
        self, model: nn.Module, make_optimizer: OptimizerFactory
    ) -> tuple[nn.Module, torch.optim.Optimizer]: ...

    def _prepared(self, what: str) -> tuple[nn.Module, torch.optim.Optimizer]:
        self._require_init(what)
        if self.model is None or self.optimizer is None:
            raise StrategyError(f"{self.name}: {what} needs prepare(model, make_optimizer) first")
        return self.model, self.optimizer

    @contextlib.contextmanager
    def minibatch(self, *, last: bool) -> Iterator[None]:
        """Around one minibatch's forward and backward; gradients sync when ``last``."""
        self._prepared("minibatch()")
        yield

    def autocast(self) -> contextlib.AbstractContextManager:
        """Where the forward runs: bfloat16 autocast under mixed precision, else nothing."""
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        self._prepared("backward()")
        loss.backward()

    def step(self) -> float:
        """Clip (if asked), step and zero the gradients; return the global gradient norm."""
        model, optimizer = self._prepared("step()")
        norm = self._clip(model)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return norm

    def _clip(self, model: nn.Module) -> float:
        max_norm = self.options.max_grad_norm
        params = [p for p in model.parameters() if p.grad is not None]
        if max_norm is None:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        else:
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        full = getattr(norm, "full_tensor", None)  # a DTensor under FSDP2
        return float(full() if full is not None else norm)

    # -- data and collectives -------------------------------------------------------

    def sampler(self, num_samples: int, *, seed: int = 0, shard: bool = True) -> InfiniteSampler:
        """An infinite sampler; ``shard=False`` gives every rank the whole stream."""
        self._require_init("sampler()")
        if shard:
            return InfiniteSampler(
                num_samples, seed=seed, rank=self._rank, world_size=self._world_size
            )
        return InfiniteSampler(num_samples, seed=seed)

    def dataloader(
        self,
        dataset,
        *,
        batch_size: int,
        seed: int = 0,
        collate_fn: Callable | None = None,
    ) -> Iterator[Any]:
        """This rank's infinite stream of batches from its disjoint shard of ``dataset``."""
        sampler = self.sampler(len(dataset), seed=seed)
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=batch_size, sampler=sampler, collate_fn=collate_fn or list
        )
        return iter(loader)

    def gather_object(self, obj: Any) -> list[Any]:
        """``obj`` of every rank, by rank."""
        self._require_init("gather_object()")
        if self._world_size == 1:
            return [obj]
        everyone: list[Any] = [None] * self._world_size
        dist.all_gather_object(everyone, obj)
        return everyone

    def all_reduce_sum(self, value: float) -> float:
        """Sum of a number over the ranks (float64 on the wire)."""
        self._require_init("all_reduce_sum()")
        if self._world_size == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self._collective_device())
        dist.all_reduce(t)
        return float(t.item())

    def _collective_device(self) -> torch.device:
        return self._device if "nccl" in str(dist.get_backend()) else torch.device("cpu")


# --- process-group helpers shared by the torch-based strategies -------------------------


def join_process_group(backend: str | None) -> tuple[bool, int, int, int]:
    """Use the group that exists, else create one from the launcher's variables.

    Returns (created, rank, world size, local rank). The torchrun-style variables are
    exported so libraries that read only those (DeepSpeed) work under srun and mpirun.
    """
    launch = detect_launch()
    if launch is not None:
        export_torchrun_names(launch)
    created = False
    if not dist.is_initialized():
        if launch is None:
            raise StrategyError(
                "no process group and no launcher: start the ranks with torchrun, srun or "
                "mpirun, run the test with @pytest.mark.world(n), or use the 'local' strategy"
            )
        chosen = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
            dist.init_process_group(chosen, rank=launch.rank, world_size=launch.world_size)
        else:
            raise StrategyError(
                f"launched by {launch.launcher} without MASTER_ADDR/MASTER_PORT: set them "
                "(the address and a free port of rank 0's host) so the ranks can meet"
            )
        created = True
    rank, world = dist.get_rank(), dist.get_world_size()
    local = launch.local_rank if launch is not None else int(os.environ.get("LOCAL_RANK", rank))
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    os.environ.setdefault("LOCAL_RANK", str(local))
    return created, rank, world, local


def device_for(local_rank: int) -> torch.device:
    """The rank's GPU when the default group is NCCL, else the CPU."""
    if dist.is_initialized() and "nccl" in str(dist.get_backend()):
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")
