"""The reproduction line of a test run in place: the launcher's command, pytest's
options of this run, the test, its world, backend and seed."""

from __future__ import annotations

import shlex

import pytest

from rankgate.harness.item_settings import seed_for_test, world_spec
from rankgate.harness.verdict import reproduction_line, run_options
from rankgate.launch.env import LaunchEnv


def launcher_command(launch: LaunchEnv) -> str:
    """How to start this job's launcher again, for the reproduction line."""
    n, local = launch.world_size, launch.local_world_size
    if launch.launcher == "torchrun":
        if n == local:
            return f"torchrun --standalone --nproc-per-node={local}"
        return f"torchrun --nnodes={n // max(local, 1)} --nproc-per-node={local}"
    if launch.launcher == "slurm":
        return f"srun -n {n} python"
    if launch.launcher == "mpi":
        return f"mpirun -np {n} python"
    return f"mpiexec -n {n} python"


def line(
    item: pytest.Item, config: pytest.Config, launch: LaunchEnv, backend: str, base_seed: int
) -> str:
    """The command that runs ``item`` alone again, as this launcher started the run. Its
    note names the test's world, as the pool's does (a world(2) test that ran on two of
    four ranks: world=2); a test without a world marker ran on the launcher's world."""
    spec = world_spec(item)
    seeded = spec is not None  # plain tests are not seeded
    kept = run_options(list(config.invocation_params.args))
    return reproduction_line(
        item.nodeid,
        spec.size if spec is not None else launch.world_size,
        backend,
        seed_for_test(base_seed, item.nodeid) if seeded else None,
        base_seed,
        command=shlex.join([*launcher_command(launch).split(), "-m", "pytest", *kept]),
        timeout=config.getoption("rankgate_timeout"),
    )
