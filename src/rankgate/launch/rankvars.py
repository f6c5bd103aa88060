"""Rank variables for libraries that read torchrun's names.

DeepSpeed, Hugging Face and many training scripts read ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` only. Under srun or mpirun those are absent
(SLURM_PROCID / OMPI_COMM_WORLD_RANK carry the same facts), so they are mapped here
from :func:`rankgate.launch.env.detect_launch`; variables already set are kept, as
torchrun's own must win inside an srun allocation.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from rankgate.launch.env import LaunchEnv


def torchrun_names(launch: LaunchEnv) -> dict[str, str]:
    """The torchrun-style variables that describe ``launch``."""
    return {
        "RANK": str(launch.rank),
        "WORLD_SIZE": str(launch.world_size),
        "LOCAL_RANK": str(launch.local_rank),
        "LOCAL_WORLD_SIZE": str(launch.local_world_size),
    }


def export_torchrun_names(
    launch: LaunchEnv, env: MutableMapping[str, str] | None = None
) -> dict[str, str]:
    """Set the variables of :func:`torchrun_names` that are missing; returns those it set."""
    env = os.environ if env is None else env
    added = {k: v for k, v in torchrun_names(launch).items() if k not in env}
    env.update(added)
    return added
