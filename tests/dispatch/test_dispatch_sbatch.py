"""The rendered sbatch script: resources, containers, and a rank command that really runs."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from rankgate.dispatch.job import JobSpec
from rankgate.dispatch.profile import ProfileError, profile_from_dict
from rankgate.dispatch.sbatch import (
    job_exports,
    render_script,
    sbatch_directives,
    srun_command,
)

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
        # Quoted: sbatch splits #SBATCH lines on spaces outside double quotes.
        f'--output="{tmp_path}/job dir/slurm-%j.out"',
        f'--chdir="{tmp_path}/job dir"',
        "--no-requeue",
        "--nodes=2",
        "--ntasks-per-node=4",
        "--cpus-per-task=8",
        "--gres=gpu:4",
        "--time=10",
        "--partition=booster",
        "--account=a1",
        "--qos=q",
        "--exclusive",
    ]


def test_paths_without_spaces_are_not_quoted():
    job = JobSpec(job_dir="/scratch/j1", pytest_args=())
    assert sbatch_directives(_profile(workdir="/w"), job)[1:3] == [
        "--output=/scratch/j1/slurm-%j.out",
        "--chdir=/w",
    ]


@pytest.mark.parametrize("char", ['"', "\n", "\\"], ids=["double-quote", "newline", "backslash"])
def test_a_path_no_sbatch_line_can_carry_is_refused(char):
    job = JobSpec(job_dir=f"/scratch/a{char}b", pytest_args=())
    with pytest.raises(ProfileError, match=rf"results_dir = .* holds {re.escape(repr(char))}: "):
        sbatch_directives(_profile(), job)


def test_a_job_folder_with_a_dollar_is_refused_before_pytest_expands_it():
    job = JobSpec(job_dir="/scratch/$HOME/j1", pytest_args=())
    with pytest.raises(ProfileError, match=r"holds '\$': pytest expands \$NAME"):
        sbatch_directives(_profile(), job)


def test_percent_and_single_quotes_reach_sbatch_unchanged():
    # sbatch would read %j in the folder's name as the job id, and pair the quote.
    job = JobSpec(job_dir="/scratch/it's 100%j", pytest_args=())
    assert sbatch_directives(_profile(workdir="/w/it's"), job)[1:3] == [
        '--output="/scratch/it\'s 100%%j/slurm-%j.out"',
        '--chdir="/w/it\'s"',
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


def _apptainer_profile(workdir="/work/src", **extra):
    return _profile(
        workdir=workdir,
        container={
            "runtime": "apptainer",
            "image": "/img.sif",
            "mounts": ["/data:/data"],
            "options": ["--cleanenv"],
        },
        **extra,
    )


def test_apptainer_wraps_each_rank_and_binds_the_job_dir(tmp_path):
    command = srun_command(_apptainer_profile(gpus_per_node=2), _job(tmp_path))
    assert command[:4] == ["srun", "--kill-on-bad-exit=0", "bash", "-c"]
    forward, run = command[4].split("; exec ", 1)
    assert forward.startswith("for v in ${!SLURM_@} RANKGATE_JOB_DIR RANKGATE_STORE ")
    job_dir = f"{tmp_path}/job dir"
    assert shlex.split(run)[:13] == [
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
        "bash",
        "-c",
    ]


# Stands in for apptainer (not installed here) with --cleanenv's documented behaviour:
# the container sees only APPTAINERENV_<NAME> variables, as NAME, plus a default PATH.
CLEANENV_APPTAINER = """#!/usr/bin/env python3
import os, sys
args = sys.argv[2:]
image = args.index("/img.sif")
env = {k[len("APPTAINERENV_"):]: v for k, v in os.environ.items() if k.startswith("APPTAINERENV_")}
env["PATH"] = "/usr/bin:/bin"
os.execve("/bin/bash", args[image + 1:], env)
"""


@pytest.mark.parametrize("rank", [0, 1])
def test_cleanenv_container_still_sees_the_rank_and_the_job_environment(tmp_path, rank):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apptainer").write_text(CLEANENV_APPTAINER)
    fake_python = bin_dir / "python"
    fake_python.write_text(
        f"#!{sys.executable}\nimport json, os\n"
        "print(json.dumps({k: v for k, v in os.environ.items() if k != 'PATH'}))\n"
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    job = _job(tmp_path)
    os.makedirs(job.job_dir)
    profile = _apptainer_profile(str(tmp_path), python=str(fake_python), env={"NCCL_DEBUG": "WARN"})
    task_env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_PROCID": str(rank),
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": str(rank),
        "SLURM_NTASKS_PER_NODE": "2",
        "HOSTILE": "not forwarded",
        **job_exports(profile, job),
    }
    subprocess.run(srun_command(profile, job)[2:], env=task_env, check=True, cwd=tmp_path)
    seen = json.loads((tmp_path / "job dir" / f"rank{rank}.log").read_text())
    assert {k: seen.get(k) for k in ("SLURM_PROCID", "SLURM_NTASKS", "NCCL_DEBUG")} == {
        "SLURM_PROCID": str(rank),
        "SLURM_NTASKS": "2",
        "NCCL_DEBUG": "WARN",
    }
    assert seen["RANKGATE_STORE"] == f"{tmp_path}/job dir/rendezvous.store"
    assert "HOSTILE" not in seen


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
