"""The SLURM target: submit with sbatch, poll, cancel, and collect every rank's results.

The same code drives a local SLURM CLI and a login node over ssh; only the
:class:`~rankgate.dispatch.command.Shell` differs. Polling asks SLURM for the job's
record as JSON where it can (:mod:`.slurm_query`), and ``sacct`` only when the job has
already left slurmctld's memory and accounting is on.
"""

from __future__ import annotations

import json
import secrets
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rankgate.dispatch.command import CommandError, Shell
from rankgate.dispatch.outcome import Outcome, slurm_state
from rankgate.dispatch.profile import Profile, ProfileError
from rankgate.dispatch.results import DispatchResult, merge_job_dir
from rankgate.dispatch.sbatch import SCRIPT_NAME, JobSpec, render_script, submit_command
from rankgate.dispatch.slurm_query import SlurmQuery
from rankgate.dispatch.watch import Observation, Progress, caught_interrupts, watch


class SubmitError(RuntimeError):
    """sbatch refused the job; ``str()`` is sbatch's own message, verbatim."""


def new_job_dir(results_dir: str, stage: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{results_dir.rstrip('/')}/{stage}-{stamp}-{secrets.token_hex(3)}"


class SlurmTarget:
    """Runs jobs through sbatch/squeue/scontrol/scancel on a :class:`Shell`."""

    def __init__(self, profile: Profile, shell: Shell | None = None) -> None:
        self.profile = profile
        self.shell = shell or Shell(
            host=profile.host or None, ssh_options=tuple(profile.ssh_options)
        )
        self.query = SlurmQuery(self.shell)

    # --- the four verbs ---------------------------------------------------------

    def submit(self, job: JobSpec) -> str:
        """Write the script into the job directory and sbatch it; returns the job id."""
        script_path = f"{job.job_dir}/{SCRIPT_NAME}"
        self.shell.write_file(script_path, render_script(self.profile, job), mode=0o755)
        meta = {
            "profile": self.profile.name,
            "world_size": self.profile.world_size,
            "pytest_args": list(job.pytest_args),
        }
        self.shell.write_file(f"{job.job_dir}/dispatch.json", json.dumps(meta, indent=2) + "\n")
        try:
            out = self.shell.run(submit_command(script_path))
        except CommandError as exc:
            raise SubmitError((exc.stderr or exc.stdout).strip() or str(exc)) from None
        job_id = out.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SubmitError(f"sbatch printed no job id: {out.stdout!r} {out.stderr!r}")
        return job_id

    def status(self, job_id: str) -> Observation:
        """Where job ``job_id`` is now (:mod:`.slurm_query`, then sacct)."""
        return (
            self.query.look(job_id)
            or self._from_accounting(job_id)
            or Observation("UNKNOWN", Outcome.LOST, "job is in neither squeue, scontrol nor sacct")
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

    def find(self, name: str) -> str | None:
        """The id of the job named ``name`` (job names are unique per dispatch), if any.

        How a job is found whose id sbatch never printed: sbatch killed by a Ctrl-C after
        slurmctld accepted the job, or an ssh connection lost in between.
        """
        try:
            return self.query.find(name)
        except CommandError:
            return None

    def cancel(self, job_id: str) -> None:
        self.shell.run(["scancel", job_id], check=False)

    def collect(self, job_dir: str, local: Path) -> Path:
        """The job directory on this machine (copied from the login node for ssh)."""
        return self.shell.fetch_dir(job_dir, local)

    # --- the whole round trip ---------------------------------------------------

    def run(
        self,
        job: JobSpec,
        *,
        deadline_s: float | None = None,
        queue_timeout_s: float | None = None,
        run_timeout_s: float | None = None,
        poll_s: float = 2.0,
        progress: Progress | None = None,
        local_dir: Path | None = None,
    ) -> DispatchResult:
        """Submit ``job``, wait for it (:func:`~rankgate.dispatch.watch.watch`), merge results.

        rankgate cancels the job at its deadlines or on SIGINT/SIGTERM; the outcome then
        says which (``deadline``, ``queue-timeout``, ``run-timeout``, ``interrupted``).
        """
        say = progress or (lambda line: None)
        result = DispatchResult(
            profile=self.profile.name,
            target=self.profile.target,
            job_id="",
            outcome=Outcome.SUBMIT_ERROR,
        )
        # Caught from before sbatch: a Ctrl-C while it submits must not orphan the job.
        with caught_interrupts() as interrupts:
            try:
                job_id = self.submit(job)
            except (SubmitError, CommandError) as exc:
                found = self.find(job.name)
                if found is None:
                    result.message = str(exc)
                    if interrupts:
                        result.outcome = Outcome.INTERRUPTED
                    return result
                job_id = found  # accepted, but its id never reached us: watch it all the same
                say(f"sbatch failed ({exc}) after SLURM accepted job {job_id} ({job.name})")
            result.job_id = job_id
            say(f"submitted job {job_id} ({self.profile.world_size} ranks) -> {job.job_dir}")
            waited = watch(
                lambda: self.status(job_id),
                lambda: self.cancel(job_id),
                label=f"job {job_id}",
                poll_s=poll_s,
                say=say,
                deadline_s=deadline_s,
                queue_timeout_s=self.profile.queue_timeout
                if queue_timeout_s is None
                else queue_timeout_s,
                run_timeout_s=run_timeout_s,
                transient=(CommandError,),
                interrupts=interrupts,
            )
        last = waited.last
        result.outcome, result.state = waited.outcome, last.state
        result.reason, result.exit_code = last.reason, last.exit_code
        result.queued_s, result.running_s = waited.queued_s, waited.running_s
        if waited.why:
            result.reason = waited.why
            result.message = (
                f"SLURM will never start job {job_id} as submitted ({waited.why}): the "
                "partition, account or QOS cannot give what the profile asks for; compare "
                "nodes, tasks_per_node, cpus_per_task, gpus_per_node and time_limit with "
                f"`scontrol show partition {self.profile.partition or '<default>'}`"
            )
        local = local_dir or (
            Path(job.job_dir)
            if self.shell.host is None
            else Path(tempfile.mkdtemp(prefix="rankgate-"))
        )
        try:
            result.job_dir = self.collect(job.job_dir, local)
        except CommandError as exc:
            result.message = f"could not fetch the job directory: {exc}"
            return result
        result.merged = merge_job_dir(result.job_dir, self.profile.world_size)
        result.write_summary()
        return result


def run_stage(
    profile: Profile,
    *,
    stage: str,
    pytest_args: Sequence[str],
    inplace: bool = True,
    **wait,
) -> DispatchResult:
    """Dispatch ``pytest pytest_args`` as stage ``stage`` on the SLURM profile.

    A local target (``slurm``) defaults its results folder to ``out/dispatch`` and its
    working folder to the current one; over ssh both must be given as absolute paths
    on the cluster. ``wait`` goes to :meth:`SlurmTarget.run` (deadlines, poll_s,
    progress, local_dir).
    """
    job_dir, workdir = _job_paths(profile, stage)
    job = JobSpec(
        job_dir=job_dir,
        pytest_args=tuple(pytest_args),
        # Unique, like the folder: a job whose id sbatch never printed is found by it.
        name=f"rankgate-{Path(job_dir).name}",
        workdir=workdir,
        inplace=inplace,
    )
    return SlurmTarget(profile).run(job, **wait)


def _job_paths(profile: Profile, stage: str) -> tuple[str, str]:
    if profile.target == "slurm":
        results = Path(profile.results_dir or "out/dispatch").resolve()
        return new_job_dir(str(results), stage), str(Path(profile.workdir or ".").resolve())
    for key, what in (("results_dir", "a folder all nodes see"), ("workdir", "the checkout")):
        value = getattr(profile, key)
        if not value.startswith("/"):
            raise ProfileError(
                f"profile {profile.name!r}: {key} = {value!r}; over ssh give an absolute path "
                f"on the cluster ({what})"
            )
    return new_job_dir(profile.results_dir, stage), profile.workdir
