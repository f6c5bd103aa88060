"""The command that starts n ranks under a launcher (torchrun, srun, mpirun).

:func:`launcher_argv` puts ``python -m ...`` behind it; a launcher that is not
installed is a :class:`LauncherUnavailable` naming the package that brings it.
"""

from __future__ import annotations

import os
import shutil
import sys

from rankgate.errors import RankgateError

LAUNCHERS = ("torchrun", "srun", "mpirun")


class LauncherUnavailable(RankgateError, RuntimeError):
    """The launcher's program is not installed here; the message says how to get it."""


def launcher_argv(launcher: str, nprocs: int, python: str | None = None) -> list[str]:
    """The command that starts ``nprocs`` copies of what follows it (``python -m ...``).

    ``python``: the interpreter of the launcher (torchrun) and of every rank; by default
    this one. Given, torchrun runs it as its program (``--no-python python -u``, what
    torchrun itself puts before ``-m``).
    """
    interpreter = python or sys.executable
    if launcher == "torchrun":
        # torch.distributed.run under this interpreter: the torchrun on PATH may be another's.
        start = [interpreter, "-m", "torch.distributed.run", "--standalone",
                 "--nproc-per-node", str(nprocs)]  # fmt: skip
        return [*start, "--no-python", python, "-u"] if python else start
    if launcher == "srun":
        if shutil.which("srun") is None:
            raise LauncherUnavailable("srun is not installed: apt-get install slurm-wlm")
        # --immediate: fail at once when the cluster has no room, instead of queueing forever.
        return ["srun", "-n", str(nprocs), "--immediate=60", "--kill-on-bad-exit=1",
                interpreter]  # fmt: skip
    if launcher == "mpirun":
        if shutil.which("mpirun") is None:
            raise LauncherUnavailable("mpirun is not installed: apt-get install openmpi-bin")
        root = ["--allow-run-as-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
        return ["mpirun", *root, "--oversubscribe", "-np", str(nprocs), interpreter]
    raise ValueError(f"unknown launcher {launcher!r}; use one of {', '.join(LAUNCHERS)}")
