"""Render the sbatch script of a dispatched stage.

The script loads the profile's modules, runs its pre-exec lines, exports its
environment, then ``srun``-launches pytest on every task. pytest runs in the
harness's in-place mode (``--rankgate-mode=inplace``): the ranks come from SLURM's
variables (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), every rank runs the same tests,
and every rank writes ``junit.rank<R>.xml`` and ``rank<R>.log`` into the job directory,
which :mod:`.job_result` merges. The ranks rendezvous through a FileStore in the job
directory (RANKGATE_STORE), so no TCP port has to be free on the nodes.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from rankgate.dispatch.job import JobSpec
from rankgate.dispatch.job_result import JUNIT_BASE, junit_name, log_name
from rankgate.dispatch.profile import Profile, check_job_path

SCRIPT_NAME = "job.sbatch"
_ENV_PREFIX = {"apptainer": "APPTAINERENV_", "singularity": "SINGULARITYENV_"}


def resource_options(profile: Profile) -> list[str]:
    """The profile's SLURM resource options, each one ``--key=value`` word.

    Shared by the sbatch script and the interLink pod's ``slurm-job.vk.io/flags``.
    """
    options = [
        f"--nodes={profile.nodes}",
        f"--ntasks-per-node={profile.tasks_per_node}",
        f"--cpus-per-task={profile.cpus_per_task}",
    ]
    if profile.gpus_per_node:
        options.append(f"--gres=gpu:{profile.gpus_per_node}")
    options.append(f"--time={profile.time_limit}")
    if profile.partition:
        options.append(f"--partition={profile.partition}")
    if profile.account:
        options.append(f"--account={profile.account}")
    if profile.qos:
        options.append(f"--qos={profile.qos}")
    return [*options, *profile.sbatch_options]


def sbatch_directives(profile: Profile, job: JobSpec) -> list[str]:
    """``#SBATCH`` options: the job's name and files, then the resources.

    ``--no-requeue``: a requeued job would rerun the tests over its own results and hide
    the node failure that requeued it; ``sbatch_options = ["--requeue"]`` overrides it.
    """
    check_job_path("results_dir", job.job_dir)
    return [
        f"--job-name={job.name}",
        # sbatch reads %j, %x ... anywhere in --output's path; %% is a plain %.
        _path_directive("--output", job.job_dir.replace("%", "%%") + "/slurm-%j.out"),
        _path_directive("--chdir", _workdir(profile, job)),
        "--no-requeue",
        *resource_options(profile),
    ]


_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./:@+=,%-]*")


def _path_directive(option: str, path: str) -> str:
    """``--option=path``, double-quoted unless plain: sbatch splits #SBATCH lines on
    whitespace outside double quotes and pairs single quotes (``Unmatched '``); inside
    double quotes a single quote, ``$``, ``;`` or a backtick reach sbatch unchanged."""
    check_job_path(option, path, allow="$")  # a directive is never expanded
    return f"{option}={path}" if _PLAIN_PATH.fullmatch(path) else f'{option}="{path}"'


def _workdir(profile: Profile, job: JobSpec) -> str:
    return job.workdir or profile.workdir or job.job_dir


def rank_command(profile: Profile, job: JobSpec, rank_var: str = "SLURM_PROCID") -> str:
    """The shell command each rank runs: pytest with its own JUnit file and log.

    ``rank_var`` names the launcher's rank variable (SLURM_PROCID under srun, RANK
    under torchrun).
    """
    rank = "${" + rank_var + "}"
    dirq = shlex.quote(job.job_dir)
    pytest = [profile.python, "-m", "pytest", "-p", "no:cacheprovider"]
    if job.inplace:
        pytest.append("--rankgate-mode=inplace")
    # In-place mode turns --junitxml=D/junit.xml into D/junit.rank<R>.xml itself.
    junit = JUNIT_BASE if job.inplace else junit_name(rank)
    args = shlex.join([*pytest, *job.pytest_args])
    return (
        f'exec >{dirq}/"{log_name(rank)}" 2>&1; '
        f"cd {shlex.quote(_workdir(profile, job))} && "
        f'exec {args} --junitxml={dirq}/"{junit}"'
    )


def job_exports(profile: Profile, job: JobSpec) -> dict[str, str]:
    """Variables the script exports to every rank: the profile's, then rankgate's."""
    return {
        **profile.env,
        "RANKGATE_JOB_DIR": job.job_dir,
        # Port-free rendezvous for the in-place harness: a FileStore on the shared FS.
        "RANKGATE_STORE": f"{job.job_dir}/rendezvous.store",
        "RANKGATE_SHARED_TMP": job.job_dir,
        "PYTHONUNBUFFERED": "1",
    }


def forward_env(prefix: str, names: Sequence[str]) -> str:
    """Bash that re-exports every ``SLURM_*`` variable and ``names`` as ``prefix + NAME``.

    Apptainer (APPTAINERENV_) and Singularity (SINGULARITYENV_) set ``NAME`` inside the
    container from these even under ``--cleanenv``, which strips the rest; run by each
    task on the host, so SLURM_PROCID is that task's own rank.
    """
    listed = " ".join(["${!SLURM_@}", *names])
    return f'for v in {listed}; do export "{prefix}$v=${{!v}}"; done'


def srun_command(profile: Profile, job: JobSpec) -> list[str]:
    """``srun`` plus the container wrapper, ending in ``bash -c <rank command>``."""
    srun = ["srun", "--kill-on-bad-exit=0"]
    inner = ["bash", "-c", rank_command(profile, job)]
    container = profile.container
    binds = [job.job_dir, *container.mounts]
    workdir = _workdir(profile, job)
    if workdir != job.job_dir:
        binds.insert(1, workdir)
    if container.runtime in ("apptainer", "singularity"):
        wrapper = [container.runtime, "exec"]
        if profile.gpus_per_node:
            wrapper.append("--nv")
        for bind in binds:
            wrapper += ["--bind", bind]
        run = shlex.join([*wrapper, *container.options, container.image, *inner])
        forward = forward_env(_ENV_PREFIX[container.runtime], list(job_exports(profile, job)))
        return [*srun, "bash", "-c", f"{forward}; exec {run}"]
    if container.runtime == "enroot":
        mounts = ",".join(b if ":" in b else f"{b}:{b}" for b in binds)
        pyxis = [
            f"--container-image={container.image}",
            f"--container-mounts={mounts}",
            f"--container-workdir={workdir}",
        ]
        return [*srun, *pyxis, *container.options, *inner]
    return [*srun, *inner]


def render_script(profile: Profile, job: JobSpec) -> str:
    """The whole sbatch script."""
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH {option}" for option in sbatch_directives(profile, job)]
    lines += [
        "# Rendered by rankgate dispatch; each task writes "
        f"{junit_name('<R>')} and {log_name('<R>')} here.",
        "set -uo pipefail",
    ]
    lines += [f"module load {shlex.quote(module)}" for module in profile.modules]
    lines += list(profile.pre_exec)
    exports = job_exports(profile, job)
    lines += [f"export {key}={shlex.quote(value)}" for key, value in exports.items()]
    lines += [
        shlex.join(srun_command(profile, job)),
        "exit $?",
    ]
    return "\n".join(lines) + "\n"


def submit_command(script_path: str) -> list[str]:
    """The sbatch command line (``--parsable`` prints ``jobid[;cluster]``)."""
    return ["sbatch", "--parsable", script_path]
