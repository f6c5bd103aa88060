import pytest

from rankgate.launch.env import LaunchEnv, LaunchEnvError, detect_launch, inspect_launch

pytestmark = pytest.mark.unit

TORCHRUN = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}


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


@pytest.mark.parametrize(
    ("layout", "node", "local"),
    [("2(x2)", "1", 2), ("2,1", "1", 1), ("3(x2),1", "2", 1), ("3(x2),1", "1", 3)],
)
def test_slurm_local_world_is_the_steps_count_on_this_node(layout, node, local):
    """``srun -N 2 -n 4`` sets no SLURM_NTASKS_PER_NODE; the step's per-node layout, as
    this SLURM (22.05) writes it on the two-node cluster, gives each node its count."""
    env = {
        "SLURM_PROCID": "3",
        "SLURM_NTASKS": "7",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": node,
        "SLURM_STEP_TASKS_PER_NODE": layout,
        "SLURM_NTASKS_PER_NODE": "9",  # the job's request; the step's layout wins
        "SLURM_STEP_ID": "0",
    }
    assert detect_launch(env).local_world_size == local


def test_slurm_step_layout_without_this_node_is_an_error():
    env = {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_NODEID": "2",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
        "SLURM_STEP_ID": "0",
    }
    with pytest.raises(LaunchEnvError) as info:
        detect_launch(env)
    assert str(info.value) == (
        "slurm: SLURM_STEP_TASKS_PER_NODE='1(x2)' has no task count for SLURM_NODEID='2'"
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
    env = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "node1",
        "MASTER_PORT": "29500",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
        "SLURM_STEP_ID": "0",
    }
    assert detect_launch(env).launcher == "torchrun"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "x", "WORLD_SIZE": "2", **TORCHRUN}, "torchrun: RANK='x' is not an integer"),
        (
            {"RANK": "2", "WORLD_SIZE": "2", **TORCHRUN},
            "torchrun: rank 2 is outside 0..1 (RANK='2', WORLD_SIZE='2')",
        ),
        (
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "0", "SLURM_STEP_ID": "3"},
            "slurm: world size must be >= 1, got 0 (SLURM_PROCID='0', SLURM_NTASKS='0')",
        ),
        (
            {
                "SLURM_PROCID": "0",
                "SLURM_NTASKS": "2",
                "SLURM_NTASKS_PER_NODE": "two",
                "SLURM_STEP_ID": "0",
            },
            "slurm: SLURM_NTASKS_PER_NODE='two' is not an integer",
        ),
    ],
)
def test_inconsistent_variables_are_errors(env, message):
    with pytest.raises(LaunchEnvError) as info:
        detect_launch(env)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("env", "why"),
    [
        (
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"},
            "SLURM_PROCID/SLURM_NTASKS are set but no srun step started this process "
            "(no SLURM_STEP_ID: an sbatch script's own environment)",
        ),
        (
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "batch"},
            "SLURM_PROCID/SLURM_NTASKS are set but no srun step started this process "
            "(no SLURM_STEP_ID: an sbatch script's own environment)",
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "2"},
            "RANK/WORLD_SIZE are set without MASTER_ADDR/MASTER_PORT or TORCHELASTIC_RUN_ID, "
            "which torchrun always sets",
        ),
    ],
    ids=["sbatch_script", "batch_step", "bare_rank_vars"],
)
def test_variables_no_launcher_set_for_this_process_are_ignored(env, why):
    assert inspect_launch(env) == (None, why)
    assert detect_launch(env, trust=True) is not None  # --rankgate-mode=inplace


def test_variables_inherited_from_a_python_rank_are_ignored():
    env = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}
    ancestors = [
        (200, dict(env), "/bin/bash"),  # a shell in between passes them on
        (100, dict(env), "/usr/bin/python3.11"),  # the rank, a Python program
        (50, {}, "/usr/bin/prted"),
    ]
    launch, why = inspect_launch(env, ancestors=ancestors)
    assert launch is None
    assert why == (
        "OMPI_COMM_WORLD_RANK=0/OMPI_COMM_WORLD_SIZE=2 were inherited from process 100 "
        "(/usr/bin/python3.11), which holds them itself: a rank started this pytest, the "
        "launcher did not"
    )


def test_a_shell_between_launcher_and_pytest_keeps_the_launch():
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}
    ancestors = [(200, dict(env), "/bin/bash"), (50, {"PATH": "/bin"}, "/usr/sbin/slurmstepd")]
    launch, why = inspect_launch(env, ancestors=ancestors)
    assert (launch.launcher, launch.rank, why) == ("slurm", 1, None)
