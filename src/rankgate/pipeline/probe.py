"""What this machine can run: GPUs, SLURM, a container engine, rankgate's optional modules.

Each probe runs once per :class:`Machine`, when a stage first asks, so ``nox -l`` and
``rankgate run --list`` stay instant (no torch import, no engine call).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil

from rankgate.proc import command

ENGINES = ("podman", "docker")


class Machine:
    """Probes of the machine that runs the stages; ``missing(need)`` says why one is absent."""

    def missing(self, need: str) -> str | None:
        """None when ``need`` is met here, else the reason (which names the fix)."""
        if need == "gpus":
            count, why = self.gpus
            return None if count else f"needs GPUs: {why}"
        if need == "slurm":
            return self.slurm
        if need == "container-engine":
            engine, why = self.container_engine
            return None if engine else f"needs a container engine: {why}"
        raise ValueError(f"unknown need {need!r}")

    @functools.cached_property
    def gpus(self) -> tuple[int, str]:
        """(CUDA devices torch sees, why none)."""
        try:
            import torch
        except ImportError as exc:
            return 0, f"torch does not import ({exc})"
        if not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            return 0, f"torch {torch.__version__} ({build}) sees no CUDA device"
        return torch.cuda.device_count(), ""

    @functools.cached_property
    def slurm(self) -> str | None:
        """None when SLURM's client tools are here, else why not."""
        absent = [tool for tool in ("sbatch", "srun", "squeue") if shutil.which(tool) is None]
        if absent:
            return (
                f"needs SLURM: {', '.join(absent)} not on PATH "
                "(apt-get install slurm-wlm for a local cluster)"
            )
        return None

    @functools.cached_property
    def container_engine(self) -> tuple[str, str]:
        """(the first engine that answers ``ENGINE info``, why none did).

        RANKGATE_CONTAINER_ENGINE picks one engine instead of trying podman, then docker.
        """
        chosen = os.environ.get("RANKGATE_CONTAINER_ENGINE")
        reasons = []
        for engine in (chosen,) if chosen else ENGINES:
            code, output = command.capture([engine, "info"], timeout=60)
            if code == 0:
                return engine, ""
            last = output.strip().splitlines()[-1] if output.strip() else f"exit code {code}"
            reasons.append(f"{engine}: {last}" if code != 127 else f"{engine} not on PATH")
        return "", "; ".join(reasons) + " (apt-get install podman runc)"


def module_missing(name: str) -> str | None:
    """None when rankgate module ``name`` is installed, else the reason."""
    try:
        found = importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        found = False
    return None if found else f"{name} is not in this rankgate (module missing)"
