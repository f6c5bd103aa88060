"""What a dispatched job runs: one :class:`JobSpec`, whichever target runs it.

A target turns a stage and its pytest arguments into a job spec
(:meth:`~rankgate.dispatch.target.Target.job`): SLURM a folder under the profile's
``results_dir`` on a shared file system, interLink a folder inside the pod. The rank
command (:func:`rankgate.dispatch.sbatch.rank_command`) and the pod script are built
from it.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """What to run: a job directory, the pytest arguments, and a name."""

    job_dir: str
    """Directory for the script, the per-rank files and the target's own output."""
    pytest_args: tuple[str, ...]
    """Arguments after ``python -m pytest`` (marker expression, paths, options)."""
    name: str = "rankgate"
    """Job name (``--job-name``, the pod's name); unique per dispatch."""
    stage: str = ""
    """The pipeline stage it runs (a label on the pod)."""
    workdir: str = ""
    """Where pytest runs; defaults to the profile's workdir, else the job directory."""
    inplace: bool = True
    """Pass ``--rankgate-mode=inplace`` (the harness's mode for launcher-started pytest)."""


def new_job_dir(results_dir: str, stage: str) -> str:
    """A fresh folder for one job of ``stage`` under ``results_dir`` (time and random suffix)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{results_dir.rstrip('/')}/{stage}-{stamp}-{secrets.token_hex(3)}"
