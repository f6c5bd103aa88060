"""The SLURM target: submit with sbatch, poll, cancel, and collect every rank's results.

The same code drives a local SLURM CLI and a login node over ssh; only the
:class:`~rankgate.dispatch.command.Shell` differs. Polling asks ``squeue`` first (cheap,
knows pending and running jobs), then ``scontrol show job`` for the final state, exit
code and reason, and ``sacct`` only when the job has already left slurmctld's memory
and accounting is on.
"""

from __future__ import annotations

import json
import re
import secrets
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rankgate.dispatch.command import CommandError, Shell
from rankgate.dispatch.outcome import Outcome, Phase, slurm_state
from rankgate.dispatch.profile import Profile, ProfileError
from rankgate.dispatch.results import DispatchResult, merge_job_dir
from rankgate.dispatch.sbatch import SCRIPT_NAME, JobSpec, render_script, submit_command

Progress = Callable[[str], None]
CANCEL_GRACE_S = 60.0
"""Seconds to wait for a job rankgate cancelled to reach a final state."""


@dataclass(frozen=True, slots=True)
class JobStatus:
    """One observation of a job."""

    state: str
    """Raw state word, e.g. PENDING, RUNNING, CANCELLED."""
    status: Phase | Outcome
    reason: str = ""
    exit_code: str = ""
    node_list: str = ""


class SubmitError(RuntimeError):
    """sbatch refused the job; ``str()`` is sbatch's own message, verbatim."""


def new_job_dir(results_dir: str, stage: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{results_dir.rstrip('/')}/{stage}-{stamp}-{secrets.token_hex(3)}"


def _fields(text: str) -> dict[str, str]:
    """``Key=Value`` pairs of ``scontrol show job -o`` (values may not contain spaces)."""
    return dict(re.findall(r"(\w+)=(\S*)", text))


class SlurmTarget:
    """Runs jobs through sbatch/squeue/scontrol/scancel on a :class:`Shell`."""

    def __init__(self, profile: Profile, shell: Shell | None = None) -> None:
        self.profile = profile
        self.shell = shell or Shell(
            host=profile.host or None, ssh_options=tuple(profile.ssh_options)
        )

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

    def status(self, job_id: str) -> JobStatus:
        """Where job ``job_id`` is now (squeue, then scontrol, then sacct)."""
        out = self.shell.run(
            ["squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T|%r|%N"], check=False
        )
        seen = None
        if out.returncode == 0 and out.stdout.strip():
            state, reason, nodes = ([*out.stdout.strip().splitlines()[0].split("|"), "", ""])[:3]
            seen = JobStatus(state, slurm_state(state), reason, "", nodes)
            if isinstance(seen.status, Phase):
                return seen
        show = self.shell.run(["scontrol", "show", "job", "-o", job_id], check=False)
        if show.returncode == 0 and "JobState=" in show.stdout:
            f = _fields(show.stdout)
            state = f.get("JobState", "")
            return JobStatus(
                state,
                slurm_state(state),
                f.get("Reason", ""),
                f.get("ExitCode", ""),
                f.get("NodeList", ""),
            )
        return (
            self._from_accounting(job_id)
            or seen
            or JobStatus("UNKNOWN", Outcome.LOST, "job is in neither squeue, scontrol nor sacct")
        )

    def _from_accounting(self, job_id: str) -> JobStatus | None:
        acct = self.shell.run(
            ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode,Reason,NodeList"],
            check=False,
        )
        if acct.returncode != 0 or not acct.stdout.strip():
            return None  # accounting off, or the job is unknown to it
        line = acct.stdout.strip().splitlines()[0]
        state, exit_code, reason, nodes = ([*line.split("|"), "", "", ""])[:4]
        return JobStatus(state, slurm_state(state), reason, exit_code, nodes)

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
        poll_s: float = 2.0,
        progress: Progress | None = None,
        local_dir: Path | None = None,
    ) -> DispatchResult:
        """Submit ``job``, wait for it, and return its merged result.

        The job is cancelled when ``deadline_s`` passes (outcome ``deadline``) or when
        the process gets SIGINT/SIGTERM (outcome ``interrupted``). ``progress`` gets a
        line whenever the job changes phase and every 30 s while it stays in one.
        """
        say = progress or (lambda line: None)
        base = DispatchResult(
            profile=self.profile.name,
            target=self.profile.target,
            job_id="",
            outcome=Outcome.SUBMIT_ERROR,
        )
        try:
            job_id = self.submit(job)
        except (SubmitError, CommandError) as exc:
            base.message = str(exc)
            return base
        base.job_id = job_id
        say(f"submitted job {job_id} ({self.profile.world_size} ranks) -> {job.job_dir}")
        final, ours = self._wait(job_id, deadline_s=deadline_s, poll_s=poll_s, say=say, timing=base)
        base.outcome = ours or final.status
        base.state, base.reason, base.exit_code = final.state, final.reason, final.exit_code
        local = local_dir or (
            Path(job.job_dir)
            if self.shell.host is None
            else Path(tempfile.mkdtemp(prefix="rankgate-"))
        )
        try:
            base.job_dir = self.collect(job.job_dir, local)
        except CommandError as exc:
            base.message = f"could not fetch the job directory: {exc}"
            return base
        base.merged = merge_job_dir(base.job_dir, self.profile.world_size)
        base.write_summary()
        return base

    def _wait(self, job_id, *, deadline_s, poll_s, say, timing):
        """Poll until the job ends; returns (last status, our outcome if we cancelled it)."""
        start = time.monotonic()
        phase_start, last_phase, last_said = start, None, 0.0
        interrupted: list[int] = []
        previous = (
            {
                sig: signal.signal(sig, lambda signum, _frame: interrupted.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)
            }
            if _main_thread()
            else {}
        )
        ours: Outcome | None = None
        cancelled_at = 0.0
        try:
            while True:
                st = self.status(job_id)
                now = time.monotonic()
                if isinstance(st.status, Outcome):
                    self._account(timing, last_phase, now - phase_start)
                    say(f"job {job_id}: {st.state} after {now - start:.0f} s")
                    return st, ours
                if st.status is not last_phase:
                    self._account(timing, last_phase, now - phase_start)
                    last_phase, phase_start, last_said = st.status, now, now
                    where = (
                        f" on {st.node_list}" if st.node_list and st.status is Phase.RUNNING else ""
                    )
                    why = f" ({st.reason})" if st.reason and st.reason != "None" else ""
                    say(f"job {job_id}: {st.status.value}{where}{why}")
                elif now - last_said >= 30:
                    last_said = now
                    say(f"job {job_id}: still {st.status.value} after {now - phase_start:.0f} s")
                if ours is None and (interrupted or (deadline_s and now - start > deadline_s)):
                    ours = Outcome.INTERRUPTED if interrupted else Outcome.DEADLINE
                    say(f"job {job_id}: {ours.value}, cancelling")
                    self.cancel(job_id)
                    cancelled_at = now
                elif ours is not None and now - cancelled_at > CANCEL_GRACE_S:
                    say(f"job {job_id}: still {st.state} {CANCEL_GRACE_S:g} s after scancel")
                    return st, ours
                time.sleep(poll_s if ours is None else 0.5)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @staticmethod
    def _account(timing: DispatchResult, phase: Phase | None, seconds: float) -> None:
        if phase is Phase.QUEUED:
            timing.queued_s += seconds
        elif phase is Phase.RUNNING:
            timing.running_s += seconds


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def run_stage(
    profile: Profile,
    *,
    stage: str,
    pytest_args: Sequence[str],
    deadline_s: float | None = None,
    poll_s: float = 2.0,
    progress: Progress | None = None,
    local_dir: Path | None = None,
    inplace: bool = True,
) -> DispatchResult:
    """Dispatch ``pytest pytest_args`` as stage ``stage`` on the SLURM profile.

    A local target (``slurm``) defaults its results folder to ``out/dispatch`` and its
    working folder to the current one; over ssh both must be given as absolute paths
    on the cluster.
    """
    job_dir, workdir = _job_paths(profile, stage)
    job = JobSpec(
        job_dir=job_dir,
        pytest_args=tuple(pytest_args),
        name=f"rankgate-{stage}",
        workdir=workdir,
        inplace=inplace,
    )
    return SlurmTarget(profile).run(
        job, deadline_s=deadline_s, poll_s=poll_s, progress=progress, local_dir=local_dir
    )


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
