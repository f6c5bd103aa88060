"""Rank variables under torchrun's names, for libraries that read only those."""

from __future__ import annotations

import pytest

from rankgate.launch.env import detect_launch
from rankgate.launch.rankvars import export_torchrun_names

pytestmark = pytest.mark.unit


def test_mpirun_variables_are_exported_under_torchruns_names():
    env = {
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }
    added = export_torchrun_names(detect_launch(env), env)
    assert added == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert env["LOCAL_RANK"] == "1"


def test_variables_already_set_are_kept():
    # torchrun inside an srun allocation: torchrun's numbering is the group's.
    env = {
        "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0",
        "LOCAL_RANK": "0",
    }  # fmt: skip
    added = export_torchrun_names(detect_launch(env), env)
    assert "LOCAL_RANK" not in added and env["LOCAL_RANK"] == "0"
    assert env["RANK"] == "5" and env["WORLD_SIZE"] == "8"
