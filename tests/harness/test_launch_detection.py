"""pytest under launcher variables that no launcher set for it runs normally, on pools.

An sbatch script without srun carries SLURM_PROCID/SLURM_NTASKS; a process a rank
started carries that rank's OMPI_* or torchrun variables. Taking either for a launch
made every rank-0 pytest wait for ranks that never come ("Wait timeout" after 60 s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.dist

ROOT = Path(__file__).resolve().parents[2]
SELECTION = ["-m", "unit", "tests/harness/test_spec.py", "tests/launch/test_env.py"]
# Runs its arguments as a child: the variables reach pytest through a Python process
# that holds them itself, as they would from a rank that runs a tool.
FROM_A_PYTHON_RANK = [
    sys.executable,
    "-c",
    "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))",
]

SCENARIOS = {
    "sbatch_script_without_srun": (
        [],
        {
            "SLURM_PROCID": "0",
            "SLURM_NTASKS": "2",
            "SLURM_JOB_ID": "4242",
            "SLURM_NTASKS_PER_NODE": "2",
        },
        "SLURM_PROCID/SLURM_NTASKS are set but no srun step started this process",
    ),
    "open_mpi_rank_variables_inherited": (
        FROM_A_PYTHON_RANK,
        {
            "OMPI_COMM_WORLD_RANK": "0",
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "PMIX_NAMESPACE": "prterun-inherited@1",
        },
        "OMPI_COMM_WORLD_RANK=0/OMPI_COMM_WORLD_SIZE=2 were inherited from process",
    ),
    "torchrun_rank_variables_inherited": (
        FROM_A_PYTHON_RANK,
        {
            "RANK": "0",
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "1",
            "TORCHELASTIC_RUN_ID": "inherited",
        },
        "RANK=0/WORLD_SIZE=2 were inherited from process",
    ),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_unit_stage_passes_under_inherited_launcher_variables(scenario):
    wrapper, variables, why = SCENARIOS[scenario]
    env = {**os.environ, **variables}
    cmd = [*wrapper, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *SELECTION]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout and "failed" not in proc.stdout
    assert f"rankgate: world tests run on worker pools: {why}" in proc.stdout
    assert seconds < 50, f"took {seconds:.0f} s: it waited for ranks that never come"
