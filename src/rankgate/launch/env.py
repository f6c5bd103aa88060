"""Rank environment normalisation: one view of rank and world whatever started us.

torchrun sets RANK/WORLD_SIZE/LOCAL_RANK; srun sets SLURM_PROCID/SLURM_NTASKS/
SLURM_LOCALID; Open MPI's mpirun sets OMPI_COMM_WORLD_*; MPICH/Intel MPI (Hydra)
set PMI_RANK/PMI_SIZE. The first complete set found wins, in that order, because
torchrun inside an srun allocation sets both and torchrun's numbering is the one
its process group uses.

A set of variables counts only where a launcher started this very process as one of
its ranks; the variables alone can be inherited (checked in ``origin_problem``):
- SLURM_PROCID/SLURM_NTASKS are in an sbatch script's own environment too; only srun
  adds SLURM_STEP_ID.
- torchrun always sets MASTER_ADDR/MASTER_PORT and TORCHELASTIC_RUN_ID; RANK and
  WORLD_SIZE alone are some other tool's.
- A process a rank started (a test that runs pytest, a training script calling a
  tool) inherits its rank's variables: when a Python ancestor, up to the launcher,
  holds the same rank and world size, that ancestor is the rank, not this process.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from rankgate.errors import RankgateError

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


class LaunchEnvError(RankgateError, ValueError):
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


def _slurm_step_tasks_here(env: Mapping[str, str]) -> int:
    """Tasks of this srun step on this node. SLURM_NTASKS_PER_NODE is only set when the
    job asked for --ntasks-per-node (``srun -N 2 -n 4`` leaves it out) and is the job's
    request, not the step's layout; SLURM_STEP_TASKS_PER_NODE ("2(x2)", "2,1") always is."""
    value = env["SLURM_STEP_TASKS_PER_NODE"]
    try:
        counts = []
        for part in value.split(","):
            count, _, repeat = part.partition("(x")
            counts += [int(count)] * (int(repeat.removesuffix(")")) if repeat else 1)
        return counts[int(env["SLURM_NODEID"])]
    except (ValueError, IndexError):
        raise LaunchEnvError(
            f"slurm: SLURM_STEP_TASKS_PER_NODE={value!r} has no task count for "
            f"SLURM_NODEID={env['SLURM_NODEID']!r}"
        ) from None


def _job_id(launcher: str, env: Mapping[str, str]) -> str:
    if launcher == "torchrun":
        return env.get("TORCHELASTIC_RUN_ID", "") or env.get("MASTER_PORT", "torchrun")
    if launcher == "slurm":
        return f"{env.get('SLURM_JOB_ID', 'slurm')}.{env.get('SLURM_STEP_ID', '0')}"
    if launcher == "mpi":
        return env.get("PMIX_NAMESPACE") or env.get("OMPI_MCA_ess_base_jobid", "mpi")
    return env.get("PMI_ID", "") or env.get("HYDI_CONTROL_FD", "pmi")


_NOT_A_STEP = ("batch", "extern", "interactive", "4294967294", "4294967295", "4294967293")


def origin_problem(launcher: str, env: Mapping[str, str]) -> str | None:
    """Why ``launcher``'s variables in ``env`` do not show that it started this process."""
    if launcher == "slurm" and env.get("SLURM_STEP_ID", "batch") in _NOT_A_STEP:
        return (
            "SLURM_PROCID/SLURM_NTASKS are set but no srun step started this process "
            "(no SLURM_STEP_ID: an sbatch script's own environment)"
        )
    has_master = env.get("MASTER_ADDR") and env.get("MASTER_PORT")
    if launcher == "torchrun" and not (has_master or env.get("TORCHELASTIC_RUN_ID")):
        return (
            "RANK/WORLD_SIZE are set without MASTER_ADDR/MASTER_PORT or TORCHELASTIC_RUN_ID, "
            "which torchrun always sets"
        )
    return None


def process_ancestors() -> Iterator[tuple[int, dict[str, str] | None, str]]:
    """(pid, environment it was started with or None, executable) from the parent up."""
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                raw = f.read().split(b"\0")
            environ = dict(e.decode(errors="replace").split("=", 1) for e in raw if b"=" in e)
        except OSError:
            environ = None
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(") ", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return
        yield pid, environ, exe
        pid = parent


def inherited_from(rank_var: str, size_var: str, env: Mapping[str, str], ancestors) -> str | None:
    """The Python ancestor that holds this process's rank variables, up to the launcher."""
    mine = (env.get(rank_var), env.get(size_var))
    for pid, environ, exe in ancestors:
        if environ is None or (environ.get(rank_var), environ.get(size_var)) != mine:
            return None  # the launcher, or a process the variables were not passed through
        if os.path.basename(exe).startswith("python"):
            return (
                f"{rank_var}={mine[0]}/{size_var}={mine[1]} were inherited from process "
                f"{pid} ({exe}), which holds them itself: a rank started this pytest, the "
                "launcher did not"
            )
    return None


def inspect_launch(
    env: Mapping[str, str] | None = None, *, trust: bool = False, ancestors=None
) -> tuple[LaunchEnv | None, str | None]:
    """The launch that started this process, or (None, why launcher variables are ignored).

    ``trust``: take the first complete set of variables as is (``--rankgate-mode=inplace``).
    ``ancestors``: an iterable like ``process_ancestors()``; by default the real ones
    when ``env`` is this process's own environment, none otherwise.
    """
    real = env is None
    env = os.environ if env is None else env
    ignored = None
    for launcher, (rank_var, size_var, _, _) in _LAUNCHER_VARS:
        if rank_var not in env or size_var not in env:
            continue
        if not trust:
            why_not = origin_problem(launcher, env)
            if why_not is None:
                lineage = (
                    ancestors if ancestors is not None else (process_ancestors() if real else ())
                )
                why_not = inherited_from(rank_var, size_var, env, lineage)
            if why_not is not None:
                ignored = ignored or why_not
                continue
        return _launch_env(launcher, env), None
    return None, ignored


def detect_launch(env: Mapping[str, str] | None = None, *, trust: bool = False) -> LaunchEnv | None:
    """The launch environment, or None when no launcher started this process."""
    return inspect_launch(env, trust=trust)[0]


def _launch_env(launcher: str, env: Mapping[str, str]) -> LaunchEnv:
    rank_var, size_var, local_var, local_size_var = dict(_LAUNCHER_VARS)[launcher]
    rank = _int(env, rank_var, launcher)
    world_size = _int(env, size_var, launcher)
    local_rank = _int(env, local_var, launcher) if local_var in env else rank
    if launcher == "slurm" and "SLURM_STEP_TASKS_PER_NODE" in env and "SLURM_NODEID" in env:
        local_world_size = _slurm_step_tasks_here(env)
    elif local_size_var in env:
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
