"""The strategies built on torch alone: local (one process), DDP and FSDP2."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from rankgate.workloads.trainer.strategies.base import (
    OptimizerFactory,
    Strategy,
    device_for,
    join_process_group,
)


class _BF16Autocast:
    """bfloat16 autocast on the strategy's device type (DDP and local mixed precision)."""

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.options.mixed_precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


class LocalStrategy(_BF16Autocast, Strategy):
    """One process, no process group: the baseline every distributed run is compared with."""

    name = "local"

    def __init__(self, options=None, *, device: str | torch.device = "cpu") -> None:
        super().__init__(options)
        self._chosen_device = torch.device(device)

    def _setup(self):
        return 0, 1, 0, self._chosen_device

    def _prepare(self, model: nn.Module, make_optimizer: OptimizerFactory):
        model = model.to(self.device)
        return model, make_optimizer(model.parameters())

    def gather_object(self, obj):
        self._require_init("gather_object()")
        return [obj]


class _ProcessGroupStrategy(Strategy):
    """Joins the harness's or launcher's group; destroys it at shutdown only if it made it."""

    _created_group = False

    def _setup(self):
        self._created_group, rank, world, local = join_process_group(self.options.backend)
        return rank, world, local, device_for(local)

    def _teardown(self) -> None:
        if self._created_group and dist.is_initialized():
            dist.destroy_process_group()


class DDPStrategy(_BF16Autocast, _ProcessGroupStrategy):
    """DistributedDataParallel: every rank holds the whole model; gradients are averaged."""

    name = "ddp"

    def _prepare(self, model: nn.Module, make_optimizer: OptimizerFactory):
        model = model.to(self.device)
        ids = [self.device.index] if self.device.type == "cuda" else None
        wrapped = DistributedDataParallel(model, device_ids=ids)
        return wrapped, make_optimizer(wrapped.parameters())

    @contextlib.contextmanager
    def minibatch(self, *, last: bool) -> Iterator[None]:
        model, _ = self._prepared("minibatch()")
        # no_sync must cover the forward too: DDP decides in forward() whether to reduce.
        with contextlib.nullcontext() if last else model.no_sync():
            yield


class FSDP2Strategy(_ProcessGroupStrategy):
    """fully_shard (FSDP2) on every transformer block and the root.

    Mixed precision ``bf16``: parameters are gathered and computed in bfloat16, while the
    sharded parameters, gradient reduction (``reduce_dtype``) and optimizer state stay
    float32 -- reducing in bfloat16 would lose gradient precision across ranks.
    """

    name = "fsdp2"

    @property
    def mp_policy(self) -> MixedPrecisionPolicy:
        if self.options.mixed_precision == "bf16":
            return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        return MixedPrecisionPolicy()

    def _prepare(self, model: nn.Module, make_optimizer: OptimizerFactory):
        model = model.to(self.device)
        # The mesh names the device: fully_shard's default mesh takes the machine's
        # accelerator, so CPU ranks on a GPU host would have their shards moved to a GPU.
        mesh = init_device_mesh(torch.device(self.device).type, (dist.get_world_size(),))
        policy = self.mp_policy
        for block in _blocks(model):
            fully_shard(block, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        return model, make_optimizer(model.parameters())

    @contextlib.contextmanager
    def minibatch(self, *, last: bool) -> Iterator[None]:
        model, _ = self._prepared("minibatch()")
        assert isinstance(model, FSDPModule)
        model.set_requires_gradient_sync(last)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated layers to shard one by one: TinyTransformer.blocks or a HF model's layers."""
    for path in ("blocks", "model.layers", "layers"):
        found = model
        for part in path.split("."):
            found = getattr(found, part, None)
        if isinstance(found, nn.ModuleList):
            return list(found)
    return []
