"""The SLURM target: submit with sbatch, observe, cancel, and fetch every rank's results.

The same code drives a local SLURM CLI (``slurm``) and a login node over ssh
(``slurm-ssh``); only the :class:`~rankgate.dispatch.shell.Shell` differs. Observing asks
SLURM for the job's record as JSON where it can (:mod:`.slurm_query`), and ``sacct``
only when the job has already left slurmctld's memory and accounting is on.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rankgate.dispatch.job import JobSpec, new_job_dir
from rankgate.dispatch.job_outcome import JobOutcome, slurm_state
from rankgate.dispatch.profile import Profile, ProfileError
from rankgate.dispatch.sbatch import SCRIPT_NAME, render_script, submit_command
from rankgate.dispatch.shell import Shell
from rankgate.dispatch.slurm_query import SlurmQuery
from rankgate.dispatch.target import Fetched, FetchError, SubmitError
from rankgate.dispatch.watch import Observation, WaitPolicy, Watched
from rankgate.proc.command import CommandFailed

POLL_S = 2.0
"""Seconds between looks unless ``--poll`` says otherwise."""


class SlurmTarget:
    """Runs jobs through sbatch/squeue/scontrol/scancel on a :class:`Shell`
    (implements :class:`~rankgate.dispatch.target.Target`)."""

    transient = (CommandFailed,)
    settles_after_cancel = True  # scancel'd jobs reach CANCELLED within seconds

    def __init__(self, profile: Profile, shell: Shell | None = None) -> None:
        self.profile = profile
        self.shell = shell or Shell(
            host=profile.host or None, ssh_options=tuple(profile.ssh_options)
        )
        self.query = SlurmQuery(self.shell)

    @staticmethod
    def default_wait(profile: Profile) -> WaitPolicy:
        """SLURM enforces the run time itself (time_limit); the queue gets the profile's
        queue_timeout, so a job held or starved forever still ends."""
        return WaitPolicy(poll_s=POLL_S, queue_timeout_s=profile.queue_timeout)

    @property
    def world_size(self) -> int:
        return self.profile.world_size

    def job(self, stage: str, pytest_args: Sequence[str]) -> JobSpec:
        """A fresh folder under results_dir; the job's name is unique like the folder, so
        a job whose id sbatch never printed is found by it.

        A local target (``slurm``) defaults its results folder to ``out/dispatch`` and its
        working folder to the current one; over ssh both must be given as absolute paths
        on the cluster.
        """
        job_dir, workdir = self._job_paths(stage)
        return JobSpec(
            job_dir=job_dir,
            pytest_args=tuple(pytest_args),
            name=f"rankgate-{Path(job_dir).name}",
            stage=stage,
            workdir=workdir,
        )

    def _job_paths(self, stage: str) -> tuple[str, str]:
        profile = self.profile
        if self.shell.host is None:
            results = Path(profile.results_dir or "out/dispatch").resolve()
            return new_job_dir(str(results), stage), str(Path(profile.workdir or ".").resolve())
        for key, what in (("results_dir", "a folder all nodes see"), ("workdir", "the checkout")):
            value = getattr(profile, key)
            if not value.startswith("/"):
                raise ProfileError(
                    f"profile {profile.name!r}: {key} = {value!r}; over ssh give an absolute "
                    f"path on the cluster ({what})"
                )
        return new_job_dir(profile.results_dir, stage), profile.workdir

    def describe(self, job: JobSpec) -> str:
        return render_script(self.profile, job)

    def submit(self, job: JobSpec) -> str:
        """Write the script into the job directory and sbatch it; returns the job id."""
        script_path = f"{job.job_dir}/{SCRIPT_NAME}"
        meta = {
            "profile": self.profile.name,
            "world_size": self.profile.world_size,
            "pytest_args": list(job.pytest_args),
        }
        try:
            self.shell.write_file(script_path, render_script(self.profile, job), mode=0o755)
            self.shell.write_file(f"{job.job_dir}/dispatch.json", json.dumps(meta, indent=2) + "\n")
            out = self.shell.run(submit_command(script_path))
        except CommandFailed as exc:
            raise SubmitError((exc.stderr or exc.stdout).strip() or str(exc)) from None
        job_id = out.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SubmitError(f"sbatch printed no job id: {out.stdout!r} {out.stderr!r}")
        return job_id

    def find(self, job: JobSpec) -> str | None:
        """The job by its unique name: sbatch killed by a Ctrl-C after slurmctld accepted
        it, or an ssh connection lost in between."""
        try:
            return self.query.find(job.name)
        except CommandFailed:
            return None

    def submitted(self, job: JobSpec, job_id: str) -> str:
        return f"submitted job {job_id} ({self.profile.world_size} ranks) -> {job.job_dir}"

    def label(self, job_id: str) -> str:
        return f"job {job_id}"

    def observe(self, job_id: str) -> Observation:
        """Where job ``job_id`` is now (:mod:`.slurm_query`, then sacct)."""
        return (
            self.query.look(job_id)
            or self._from_accounting(job_id)
            or Observation(
                "UNKNOWN", JobOutcome.LOST, "job is in neither squeue, scontrol nor sacct"
            )
        )

    def _from_accounting(self, job_id: str) -> Observation | None:
        acct = self.shell.run(
            ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode,Reason,NodeList"],
            check=False,
        )
        if acct.returncode != 0 or not acct.stdout.strip():
            return None  # accounting off, or the job is unknown to it
        line = acct.stdout.strip().splitlines()[0]
        state, exit_code, reason, nodes = ([*line.split("|"), "", "", ""])[:4]
        return Observation(state, slurm_state(state), reason, exit_code, nodes)

    def cancel(self, job_id: str) -> None:
        self.shell.run(["scancel", job_id], check=False)

    def release(self, job_id: str) -> list[str]:
        return []  # an ended job holds nothing; its folder stays on the shared file system

    def explain(self, job_id: str, watched: Watched) -> list[str]:
        if watched.outcome is not JobOutcome.UNSCHEDULABLE:
            return []
        partition = self.profile.partition or "<default>"
        return [
            f"SLURM will never start job {job_id} as submitted ({watched.why}): the "
            "partition, account or QOS cannot give what the profile asks for; compare "
            "nodes, tasks_per_node, cpus_per_task, gpus_per_node and time_limit with "
            f"`scontrol show partition {partition}`"
        ]

    def fetch(self, job: JobSpec, job_id: str, local: Path | None) -> Fetched:
        """The job directory on this machine (copied from the login node for ssh)."""
        if local is None and self.shell.host is not None:
            local = Path(tempfile.mkdtemp(prefix="rankgate-"))
        try:
            return Fetched(self.shell.fetch_dir(job.job_dir, local or Path(job.job_dir)))
        except CommandFailed as exc:
            raise FetchError(str(exc)) from None
