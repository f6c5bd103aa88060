"""Which launchers a strategy test can run under, from its markers.

``torch_dist`` and ``deepspeed_dist`` tests need a process group, which the harness's
pool (plain pytest), torchrun, srun and mpirun all give them (rank variables are
normalised by :mod:`rankgate.launch.env`). ``mpi_dist`` tests check what an MPI
launcher sets, so they need mpirun (or mpiexec). ``ray_dist`` tests start their own
local Ray cluster and Ray Train workers from one process: under a launcher every rank
would start one, so they run only in plain pytest. A test under any other launcher is
skipped with a reason naming the launchers that work -- never left to hang waiting
for peers or a cluster that will not come.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rankgate.launch.env import detect_launch

PLAIN = "pytest"
"""The 'launcher' of a run that no launcher started: world tests use the harness's pool."""

DISPLAY = {
    PLAIN: "plain pytest (the harness's worker pool)",
    "torchrun": "torchrun",
    "slurm": "srun",
    "mpi": "mpirun",
    "pmi": "mpiexec",
}

MARKER_LAUNCHERS: dict[str, tuple[str, ...]] = {
    "torch_dist": (PLAIN, "torchrun", "slurm", "mpi", "pmi"),
    "deepspeed_dist": (PLAIN, "torchrun", "slurm", "mpi", "pmi"),
    "mpi_dist": ("mpi", "pmi"),
    "ray_dist": (PLAIN,),
}

_RAY_NOTE = "plain pytest, which starts a local Ray cluster and Ray Train's workers itself"


def current_launcher(env: Mapping[str, str] | None = None) -> str:
    """torchrun, slurm, mpi, pmi, or ``pytest`` when no launcher started this process."""
    launch = detect_launch(env)
    return PLAIN if launch is None else launch.launcher


def describe(marker: str) -> str:
    """The launchers a marker's tests run under, in words."""
    if marker == "ray_dist":
        return _RAY_NOTE
    return ", ".join(DISPLAY[name] for name in MARKER_LAUNCHERS[marker])


def launcher_skip_reason(markers: Iterable[str], launcher: str) -> str | None:
    """Why a test with ``markers`` cannot run under ``launcher``, or None if it can."""
    for marker in markers:
        allowed = MARKER_LAUNCHERS.get(marker)
        if allowed is not None and launcher not in allowed:
            return (
                f"{marker} tests run under {describe(marker)}; this run was started by "
                f"{DISPLAY.get(launcher, launcher)}"
            )
    return None
