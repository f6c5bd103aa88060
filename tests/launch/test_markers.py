"""Which launchers each strategy marker allows, and the skip reason for the others."""

from __future__ import annotations

import pytest

from rankgate.launch.markers import current_launcher, launcher_skip_reason

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("env", "launcher"),
    [
        ({}, "pytest"),
        # what the launchers set: torchrun its rendezvous, srun a job step
        (
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1",
             "TORCHELASTIC_RUN_ID": "x"},
            "torchrun",
        ),
        ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}, "slurm"),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "pytest"),  # an sbatch script, no srun
        ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, "mpi"),
    ],
)
def test_current_launcher(env, launcher):
    assert current_launcher(env) == launcher


@pytest.mark.parametrize("launcher", ["pytest", "torchrun", "slurm", "mpi"])
@pytest.mark.parametrize("marker", ["torch_dist", "deepspeed_dist"])
def test_process_group_strategies_run_everywhere(marker, launcher):
    assert launcher_skip_reason([marker], launcher) is None


def test_mpi_dist_needs_mpirun():
    assert launcher_skip_reason(["mpi_dist"], "mpi") is None
    assert launcher_skip_reason(["mpi_dist"], "torchrun") == (
        "mpi_dist tests run under mpirun, mpiexec; this run was started by torchrun"
    )
    assert launcher_skip_reason(["mpi_dist"], "pytest") == (
        "mpi_dist tests run under mpirun, mpiexec; this run was started by plain pytest "
        "(the harness's worker pool)"
    )


@pytest.mark.parametrize(("launcher", "shown"), [("torchrun", "torchrun"), ("slurm", "srun"), ("mpi", "mpirun")])
def test_ray_dist_runs_only_in_plain_pytest(launcher, shown):
    assert launcher_skip_reason(["ray_dist"], "pytest") is None
    assert launcher_skip_reason(["world", "ray_dist"], launcher) == (
        "ray_dist tests run under plain pytest, which starts a local Ray cluster and Ray "
        f"Train's workers itself; this run was started by {shown}"
    )


def test_other_markers_do_not_restrict():
    assert launcher_skip_reason(["world", "dist", "hpc"], "mpi") is None
