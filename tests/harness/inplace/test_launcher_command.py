import pytest

from rankgate.harness.inplace.reproduce import launcher_command
from rankgate.launch.env import LaunchEnv

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("launcher", "world", "local", "expected"),
    [
        ("torchrun", 2, 2, "torchrun --standalone --nproc-per-node=2"),
        ("torchrun", 8, 4, "torchrun --nnodes=2 --nproc-per-node=4"),
        ("slurm", 4, 2, "srun -n 4 python"),
        ("mpi", 2, 2, "mpirun -np 2 python"),
        ("pmi", 3, 3, "mpiexec -n 3 python"),
    ],
)
def test_launcher_command(launcher, world, local, expected):
    launch = LaunchEnv(
        launcher=launcher,
        rank=0,
        world_size=world,
        local_rank=0,
        local_world_size=local,
        job_id="j",
    )
    assert launcher_command(launch) == expected
