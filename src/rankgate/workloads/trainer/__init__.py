"""The mini trainer the training suite exercises.

Main API: :class:`Trainer` (``Trainer(strategy, model, dataset, TrainConfig(...))``,
``train(steps)``, ``save(path)`` / ``load(path)`` through torch.distributed.checkpoint),
:func:`train_step` (one optimizer step over a rank's packed minibatches), the
strategies (``create_strategy("local" | "ddp" | "fsdp2" | "deepspeed" | "ray")``,
``rankgate.workloads.trainer.strategies``) and the forwards of the tiny transformer
and of a tiny Hugging Face Llama (:func:`tiny_forward`, :func:`hf_forward`).
"""

from rankgate.workloads.trainer.forward import document_attention, hf_forward, tiny_forward
from rankgate.workloads.trainer.loop import TrainConfig, Trainer, adamw
from rankgate.workloads.trainer.step import StepResult, train_step
from rankgate.workloads.trainer.strategies import (
    Strategy,
    StrategyError,
    StrategyOptions,
    create_strategy,
)

__all__ = [
    "StepResult",
    "Strategy",
    "StrategyError",
    "StrategyOptions",
    "TrainConfig",
    "Trainer",
    "adamw",
    "create_strategy",
    "document_attention",
    "hf_forward",
    "tiny_forward",
    "train_step",
]
