"""The local SLURM that the hpc tests run on: it starts, runs 2 tasks, and restarts idempotently."""

from __future__ import annotations

import subprocess

import pytest

pytestmark = pytest.mark.hpc


def test_srun_runs_two_tasks(local_slurm):
    out = subprocess.run(
        ["srun", "-n", "2", "bash", "-c", "echo $SLURM_PROCID/$SLURM_NTASKS"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert sorted(out.stdout.split()) == ["0/2", "1/2"]


def test_start_is_idempotent(local_slurm):
    again = subprocess.run(
        [str(local_slurm.script), "start"], capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"export SLURM_CONF={local_slurm.conf}"
    assert subprocess.run([str(local_slurm.script), "status"], timeout=60).returncode == 0
