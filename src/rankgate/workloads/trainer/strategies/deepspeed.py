"""DeepSpeed ZeRO stages 1-3 behind the strategy interface.

The engine owns backward and step: ``minibatch(last=...)`` sets its accumulation
boundary (the number of minibatches varies per step under packing, so the config's
fixed ``gradient_accumulation_steps`` stays 1 and the boundary is set by hand),
``backward`` does not rescale the loss, and clipping is the config's
``gradient_clipping``. :func:`unavailable_reason` says why DeepSpeed cannot run here,
or None.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator

import torch
from torch import nn

from rankgate.workloads.trainer.strategies.base import (
    OptimizerFactory,
    Strategy,
    StrategyError,
    StrategyOptions,
    device_for,
    join_process_group,
)


def unavailable_reason() -> str | None:
    """Why the deepspeed strategy cannot run in this environment, or None if it can."""
    if importlib.util.find_spec("deepspeed") is None:
        return (
            "deepspeed is not installed: pip install deepspeed (DS_BUILD_OPS=0 installs it "
            "without compiling; its ops build at first use and need a C++ compiler)"
        )
    if os.environ.get("RANKGATE_DEEPSPEED_DISABLE"):
        return "RANKGATE_DEEPSPEED_DISABLE is set"
    return None


def _without_shared_memory_op() -> None:
    """Tell DeepSpeed its CPU shared-memory op cannot be built here, before its comm
    backend starts.

    On the CPU DeepSpeed compiles that op with g++ over torch's headers when its backend
    first starts (62 CPU-s, 34 s on 2 cores, in each new environment) and then loads it in
    every rank (about 1 CPU-s each). It serves only ``inference_all_reduce`` (inference and
    tensor-parallel layers); ZeRO's training reduces through torch.distributed, which the
    backend uses alone without it. Only the entry for that op changes; the others keep
    DeepSpeed's own probe.
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


class DeepSpeedStrategy(Strategy):
    """ZeRO ``zero_stage`` 1, 2 or 3 through deepspeed.initialize on the existing group."""

    name = "deepspeed"

    def __init__(self, options: StrategyOptions | None = None, *, zero_stage: int = 2) -> None:
        if zero_stage not in (1, 2, 3):
            raise ValueError(f"zero_stage must be 1, 2 or 3, got {zero_stage}")
        super().__init__(options)
        self.zero_stage = zero_stage
        self.engine = None

    def _setup(self):
        reason = unavailable_reason()
        if reason:
            raise StrategyError(f"deepspeed: {reason}")
        import deepspeed

        _, rank, world, local = join_process_group(self.options.backend)
        _without_shared_memory_op()
        deepspeed.init_distributed(dist_backend=str(torch.distributed.get_backend()))
        _forget_cached_groups()
        return rank, world, local, device_for(local)

    def config(self) -> dict:
        config = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": self.zero_stage},
            "steps_per_print": 2**31 - 1,  # no progress lines in test output
            "wall_clock_breakdown": False,
        }
        if self.options.max_grad_norm is not None:
            config["gradient_clipping"] = self.options.max_grad_norm
        if self.options.mixed_precision == "bf16":
            config["bf16"] = {"enabled": True}
        return config

    def _prepare(self, model: nn.Module, make_optimizer: OptimizerFactory):
        import deepspeed

        model = model.to(self.device)
        optimizer = make_optimizer(model.parameters())
        engine, ds_optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, config=self.config()
        )
        self.engine = engine
        return engine, ds_optimizer

    @contextlib.contextmanager
    def minibatch(self, *, last: bool) -> Iterator[None]:
        self._prepared("minibatch()")
        self.engine.set_gradient_accumulation_boundary(last)
        yield

    def backward(self, loss: torch.Tensor) -> None:
        self._prepared("backward()")
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self) -> float:
        self._prepared("step()")
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def _teardown(self) -> None:
        if self.engine is not None:
            self.engine.destroy()
            self.engine = None
        _forget_cached_groups()


def _forget_cached_groups() -> None:
    """Drop DeepSpeed's cached subgroups (deepspeed.utils.groups) so the next engine makes
    its own. DeepSpeed keeps them for the life of the process, but a long-lived process
    outlives them: the harness's pool destroys a test's subgroups after it, and the next
    test's engine would broadcast over a destroyed group ("Group ... is not registered").
    Only references are dropped; no group is destroyed here.
    """
    from deepspeed.utils import groups

    release = getattr(groups, "_release_process_group_references", None)
    if release is not None:
        release(group=None)
    else:  # older DeepSpeed: the world clone is the cached group data parallelism uses
        groups._WORLD_GROUP = None
