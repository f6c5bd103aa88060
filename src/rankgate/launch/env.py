"""Rank environment normalisation: one view of rank and world whatever started us.

torchrun sets RANK/WORLD_SIZE/LOCAL_RANK; srun sets SLURM_PROCID/SLURM_NTASKS/
SLURM_LOCALID; Open MPI's mpirun sets OMPI_COMM_WORLD_*; MPICH/Intel MPI (Hydra)
set PMI_RANK/PMI_SIZE. The first complete set found wins, in that order, because
torchrun inside an srun allocation sets both and torchrun's numbering is the one
its process group uses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

# launcher -> (rank, world size, local rank, local world size) variable names
_LAUNCHER_VARS: tuple[tuple[str, tuple[str, str, str | None, str | None]], ...] = (
    ("torchrun", ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")),
    ("slurm", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE")),
    (
        "mpi",
        (
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        ),
    ),
    ("pmi", ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")),
)


class LaunchEnvError(ValueError):
    """The launcher's variables are present but inconsistent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchEnv:
    """Where this process sits in a job started by an external launcher."""

    launcher: str
    """Which launcher's variables were used: torchrun, slurm, mpi or pmi."""
    rank: int
    """Global rank, 0..world_size-1."""
    world_size: int
    """Number of ranks in the job."""
    local_rank: int
    """Rank among the processes on this host (selects the GPU)."""
    local_world_size: int
    """Number of ranks on this host."""
    job_id: str
    """An identifier shared by all ranks of this job (for rendezvous file names)."""

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise LaunchEnvError(f"{self.launcher}: world size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise LaunchEnvError(
                f"{self.launcher}: rank {self.rank} is outside 0..{self.world_size - 1}"
            )


def _int(env: Mapping[str, str], name: str, launcher: str, first: bool = False) -> int:
    """``first``: take the leading count of a list such as SLURM's ``2(x3)``."""
    try:
        return int(_first_int(env[name]) if first else env[name])
    except ValueError:
        raise LaunchEnvError(f"{launcher}: {name}={env[name]!r} is not an integer") from None


def _first_int(value: str) -> str:
    # SLURM_NTASKS_PER_NODE may read "2(x3)" on heterogeneous allocations.
    return value.split("(")[0].split(",")[0]


def _job_id(launcher: str, env: Mapping[str, str]) -> str:
    if launcher == "torchrun":
        return env.get("TORCHELASTIC_RUN_ID", "") or env.get("MASTER_PORT", "torchrun")
    if launcher == "slurm":
        return f"{env.get('SLURM_JOB_ID', 'slurm')}.{env.get('SLURM_STEP_ID', '0')}"
    if launcher == "mpi":
        return env.get("PMIX_NAMESPACE") or env.get("OMPI_MCA_ess_base_jobid", "mpi")
    return env.get("PMI_ID", "") or env.get("HYDI_CONTROL_FD", "pmi")


def detect_launch(env: Mapping[str, str] | None = None) -> LaunchEnv | None:
    """The launch environment, or None when no launcher started this process."""
    env = os.environ if env is None else env
    for launcher, (rank_var, size_var, local_var, local_size_var) in _LAUNCHER_VARS:
        if rank_var not in env or size_var not in env:
            continue
        rank = _int(env, rank_var, launcher)
        world_size = _int(env, size_var, launcher)
        local_rank = _int(env, local_var, launcher) if local_var in env else rank
        if local_size_var in env:
            local_world_size = _int(env, local_size_var, launcher, first=True)
        else:
            local_world_size = world_size
        try:
            return LaunchEnv(
                launcher=launcher,
                rank=rank,
                world_size=world_size,
                local_rank=local_rank,
                local_world_size=local_world_size,
                job_id=_job_id(launcher, env),
            )
        except LaunchEnvError as exc:  # name the variables that hold the bad values
            read = ", ".join(f"{v}={env[v]!r}" for v in (rank_var, size_var))
            raise LaunchEnvError(f"{exc} ({read})") from None
    return None
