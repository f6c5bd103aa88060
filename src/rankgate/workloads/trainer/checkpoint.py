"""Checkpoints through torch.distributed.checkpoint (DCP).

Model and optimizer state come from ``get_state_dict`` (full for the local and DDP
strategies, sharded DTensors under FSDP2), so each rank writes only its shard and a
checkpoint loads into the same strategy and world size. The trainer's own position
(step, sampler) travels in the same checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.optim import Optimizer


def save(path: str | Path, model: nn.Module, optimizer: Optimizer, extra: dict[str, Any]) -> None:
    """Write model, optimizer and ``extra`` (plain values) to the directory ``path``."""
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state, "extra": extra}, checkpoint_id=str(path))


def load(
    path: str | Path, model: nn.Module, optimizer: Optimizer, extra: dict[str, Any]
) -> dict[str, Any]:
    """Load what :func:`save` wrote into ``model`` and ``optimizer``.

    ``extra`` names the plain values to read back (DCP loads the keys it is given);
    returns them with the saved values.
    """
    if not Path(path).is_dir():
        raise FileNotFoundError(f"no checkpoint at {path}: save() writes a directory there")
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state, "extra": dict(extra)}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )
    return state["extra"]
