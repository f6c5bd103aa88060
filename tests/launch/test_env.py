import pytest

from rankgate.launch.env import LaunchEnv, LaunchEnvError, detect_launch

pytestmark = pytest.mark.unit


def test_no_launcher():
    assert detect_launch({"PATH": "/bin"}) is None


def test_torchrun():
    env = {
        "RANK": "3",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "TORCHELASTIC_RUN_ID": "abc",
    }
    assert detect_launch(env) == LaunchEnv(
        launcher="torchrun", rank=3, world_size=8, local_rank=1, local_world_size=2, job_id="abc"
    )


def test_slurm_with_heterogeneous_tasks_per_node():
    env = {
        "SLURM_PROCID": "5",
        "SLURM_NTASKS": "6",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS_PER_NODE": "2(x3)",
        "SLURM_JOB_ID": "42",
        "SLURM_STEP_ID": "0",
    }
    launch = detect_launch(env)
    assert (launch.launcher, launch.rank, launch.local_world_size, launch.job_id) == (
        "slurm",
        5,
        2,
        "42.0",
    )


def test_open_mpi():
    env = {
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        "PMIX_NAMESPACE": "ns",
    }
    assert detect_launch(env) == LaunchEnv(
        launcher="mpi", rank=1, world_size=2, local_rank=1, local_world_size=2, job_id="ns"
    )


def test_pmi_without_local_vars_falls_back_to_global():
    launch = detect_launch({"PMI_RANK": "0", "PMI_SIZE": "4"})
    assert (launch.launcher, launch.local_rank, launch.local_world_size) == ("pmi", 0, 4)


def test_torchrun_inside_srun_uses_torchrun_numbering():
    env = {"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    assert detect_launch(env).launcher == "torchrun"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, "torchrun: RANK='x' is not an integer"),
        (
            {"RANK": "2", "WORLD_SIZE": "2"},
            "torchrun: rank 2 is outside 0..1 (RANK='2', WORLD_SIZE='2')",
        ),
        (
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "0"},
            "slurm: world size must be >= 1, got 0 (SLURM_PROCID='0', SLURM_NTASKS='0')",
        ),
        (
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "two"},
            "slurm: SLURM_NTASKS_PER_NODE='two' is not an integer",
        ),
    ],
)
def test_inconsistent_variables_are_errors(env, message):
    with pytest.raises(LaunchEnvError) as info:
        detect_launch(env)
    assert str(info.value) == message
