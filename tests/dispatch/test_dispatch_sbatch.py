"""The rendered sbatch script: resources, containers, and a rank command that really runs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from rankgate.dispatch.profile import profile_from_dict
from rankgate.dispatch.sbatch import JobSpec, render_script, sbatch_directives, srun_command

pytestmark = pytest.mark.unit


def _profile(**data):
    return profile_from_dict(data, name="p")


def _job(tmp_path, **kw):
    return JobSpec(job_dir=str(tmp_path / "job dir"), pytest_args=("-m", "gpu and not slow"), **kw)


def test_directives_carry_every_resource(tmp_path):
    profile = _profile(
        partition="booster",
        account="a1",
        qos="q",
        nodes=2,
        tasks_per_node=4,
        gpus_per_node=4,
        cpus_per_task=8,
        time_limit="10",
        sbatch_options=["--exclusive"],
    )
    options = sbatch_directives(profile, _job(tmp_path, name="rankgate-gpu"))
    assert options == [
        "--job-name=rankgate-gpu",
        f"--output={tmp_path}/job dir/slurm-%j.out",
        f"--chdir={tmp_path}/job dir",
        "--cpus-per-task=8",
        "--nodes=2",
        "--ntasks-per-node=4",
        "--gres=gpu:4",
        "--time=10",
        "--partition=booster",
        "--account=a1",
        "--qos=q",
        "--exclusive",
    ]


def test_script_is_valid_bash_with_modules_pre_exec_and_env(tmp_path):
    profile = _profile(modules=["cuda/12.8"], pre_exec=["echo 'pre exec'"], env={"A": "x y"})
    script = render_script(profile, _job(tmp_path))
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)
    assert "module load cuda/12.8\necho 'pre exec'\nexport A='x y'\n" in script
    assert f"export RANKGATE_STORE='{tmp_path}/job dir/rendezvous.store'" in script


def test_rank_command_runs_pytest_with_its_own_junit_and_log(tmp_path):
    """Run each task's command for real, with a stand-in python that records its argv."""
    fake = tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    job = _job(tmp_path)
    os.makedirs(job.job_dir)
    command = srun_command(_profile(python=str(fake)), job)
    assert command[:2] == ["srun", "--kill-on-bad-exit=0"]
    for rank in (0, 1):
        env = {**os.environ, "SLURM_PROCID": str(rank)}
        subprocess.run(command[2:], env=env, check=True, cwd=tmp_path)
        argv = json.loads((tmp_path / "job dir" / f"rank{rank}.log").read_text())
        assert argv == [
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--rankgate-mode=inplace",
            "-m",
            "gpu and not slow",
            f"--junitxml={tmp_path}/job dir/junit.xml",
        ]


def test_without_inplace_each_rank_names_its_junit_file(tmp_path):
    command = srun_command(_profile(), _job(tmp_path, inplace=False))
    assert "--rankgate-mode" not in command[-1]
    assert '/"junit.rank${SLURM_PROCID}.xml"' in command[-1]


def test_apptainer_wraps_each_rank_and_binds_the_job_dir(tmp_path):
    profile = _profile(
        gpus_per_node=2,
        workdir="/work/src",
        container={
            "runtime": "apptainer",
            "image": "/img.sif",
            "mounts": ["/data:/data"],
            "options": ["--cleanenv"],
        },
    )
    command = srun_command(profile, _job(tmp_path))
    job_dir = f"{tmp_path}/job dir"
    assert command[2:13] == [
        "apptainer",
        "exec",
        "--nv",
        "--bind",
        job_dir,
        "--bind",
        "/work/src",
        "--bind",
        "/data:/data",
        "--cleanenv",
        "/img.sif",
    ]
    assert command[13:15] == ["bash", "-c"]


def test_enroot_uses_pyxis_options(tmp_path):
    profile = _profile(workdir="/w", container={"runtime": "enroot", "image": "nvcr.io#pytorch"})
    command = srun_command(profile, _job(tmp_path))
    job_dir = f"{tmp_path}/job dir"
    assert command[2:5] == [
        "--container-image=nvcr.io#pytorch",
        f"--container-mounts={job_dir}:{job_dir},/w:/w",
        "--container-workdir=/w",
    ]
    assert shlex.split(shlex.join(command)) == command
