"""Strategies: one interface (``base.Strategy``) for every way of running the loop.

``create_strategy(name, options, **kwargs)`` with name ``local`` (one process, no
process group), ``ddp``, ``fsdp2``, ``deepspeed`` (``zero_stage=1|2|3``) or ``ray``
(inside a Ray Train worker). ``unavailable_reason(name)`` says why one cannot run
here (DeepSpeed or Ray not installed), or None.
"""

from __future__ import annotations

from rankgate.workloads.trainer.strategies.base import (
    Strategy,
    StrategyError,
    StrategyOptions,
)

STRATEGIES = ("local", "ddp", "fsdp2", "deepspeed", "ray")


def create_strategy(name: str, options: StrategyOptions | None = None, **kwargs) -> Strategy:
    """A new, uninitialised strategy; call ``init()`` on it."""
    if name == "local":
        from rankgate.workloads.trainer.strategies.torch_native import LocalStrategy as cls
    elif name == "ddp":
        from rankgate.workloads.trainer.strategies.torch_native import DDPStrategy as cls
    elif name == "fsdp2":
        from rankgate.workloads.trainer.strategies.torch_native import FSDP2Strategy as cls
    elif name == "deepspeed":
        from rankgate.workloads.trainer.strategies.deepspeed import DeepSpeedStrategy as cls
    elif name == "ray":
        from rankgate.workloads.trainer.strategies.ray import RayStrategy as cls
    else:
        raise ValueError(f"unknown strategy {name!r}; use one of {', '.join(STRATEGIES)}")
    return cls(options, **kwargs)


def unavailable_reason(name: str) -> str | None:
    """Why strategy ``name`` cannot run in this environment, or None."""
    if name == "deepspeed":
        from rankgate.workloads.trainer.strategies.deepspeed import unavailable_reason as why
    elif name == "ray":
        from rankgate.workloads.trainer.strategies.ray import unavailable_reason as why
    else:
        return None
    return why()


__all__ = [
    "STRATEGIES",
    "Strategy",
    "StrategyError",
    "StrategyOptions",
    "create_strategy",
    "unavailable_reason",
]
