"""The command that starts n ranks under torchrun, srun or mpirun, and its interpreter."""

from __future__ import annotations

import shutil
import sys

import pytest

from rankgate.launch.launchers import launcher_argv

pytestmark = pytest.mark.unit


def test_torchrun_runs_under_this_interpreter_by_default():
    assert launcher_argv("torchrun", 4) == [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
    ]  # fmt: skip


def test_torchrun_given_a_python_runs_it_as_launcher_and_as_every_rank():
    # What torchrun itself puts before -m (python -u), with the given python.
    assert launcher_argv("torchrun", 2, "/opt/warm/python") == [
        "/opt/warm/python", "-m", "torch.distributed.run", "--standalone",
        "--nproc-per-node", "2", "--no-python", "/opt/warm/python", "-u",
    ]  # fmt: skip


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
def test_mpirun_starts_the_given_python_on_each_rank():
    argv = launcher_argv("mpirun", 3, "/opt/warm/python")
    assert argv[0] == "mpirun" and argv[-3:] == ["-np", "3", "/opt/warm/python"]
    assert launcher_argv("mpirun", 3)[-1] == sys.executable


@pytest.mark.skipif(shutil.which("srun") is None, reason="srun is not installed")
def test_srun_starts_the_given_python_on_each_rank():
    assert launcher_argv("srun", 2, "/opt/warm/python")[-1] == "/opt/warm/python"
    assert launcher_argv("srun", 2)[-1] == sys.executable


def test_an_unknown_launcher_names_the_known_ones():
    with pytest.raises(
        ValueError, match="unknown launcher 'mpiexec'; use one of torchrun, srun, mpirun"
    ):
        launcher_argv("mpiexec", 2, "/opt/warm/python")
