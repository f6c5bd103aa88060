"""The seam every remote target implements, and the one loop that drives it.

A :class:`Target` knows how to run a :class:`~rankgate.dispatch.job.JobSpec` somewhere
else: submit it, observe it, cancel it, release it, and fetch its results. SLURM
(:class:`~rankgate.dispatch.slurm.SlurmTarget`, locally or over ssh) and interLink
(:class:`~rankgate.dispatch.interlink.target.InterlinkTarget`, through Kubernetes or
REST) implement it; nothing else in the package asks which target it has.

:func:`run_job` is the round trip, the same for all: submit (finding a job the target
accepted but whose id was lost), :func:`~rankgate.dispatch.watch.watch` it, release it,
all under one interrupt guard, then fetch the results and build the
:class:`~rankgate.dispatch.job_result.DispatchResult`. :func:`wait_for_job` is the first
half alone (the interLink canary needs no results).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rankgate.dispatch.ended import JobEnded
from rankgate.dispatch.interrupts import Interrupts, caught_interrupts
from rankgate.dispatch.job import JobSpec
from rankgate.dispatch.job_outcome import JobOutcome
from rankgate.dispatch.job_result import DispatchResult
from rankgate.dispatch.profile import Profile
from rankgate.dispatch.watch import Progress, WaitPolicy, Watchable, Watched, watch
from rankgate.errors import RankgateError


class TargetError(RankgateError, RuntimeError):
    """The target cannot be used at all (no API, no token, a client package missing)."""


class SubmitError(RankgateError, RuntimeError):
    """The target did not accept the job; ``str()`` is its own message, verbatim."""


class FetchError(RankgateError, RuntimeError):
    """The job's folder could not be brought back (the results are then unknown)."""


@dataclass(frozen=True, slots=True)
class Fetched:
    """A job's folder on this machine, and what went wrong bringing parts of it back."""

    folder: Path
    notes: tuple[str, ...] = ()


class Target(Watchable, Protocol):
    """One way to run a job remotely (see the module docstring).

    Also :class:`~rankgate.dispatch.watch.Watchable`: ``transient``,
    ``settles_after_cancel``, ``label``, ``observe`` and ``cancel``.
    """

    profile: Profile

    @property
    def world_size(self) -> int:
        """Ranks whose results the job's folder holds."""

    def job(self, stage: str, pytest_args: Sequence[str]) -> JobSpec:
        """The job of ``stage``: its folder, name and working folder on this target."""

    def describe(self, job: JobSpec) -> str:
        """What would be submitted (the sbatch script, the pod), for ``--dry-run``."""

    def submit(self, job: JobSpec) -> str:
        """Submit ``job``; its id. Raises :class:`SubmitError` when it was refused."""

    def find(self, job: JobSpec) -> str | None:
        """The id of ``job`` when the target accepted it although ``submit`` failed."""

    def submitted(self, job: JobSpec, job_id: str) -> str:
        """The progress line that says the job was accepted."""

    def release(self, job_id: str) -> list[str]:
        """What must happen before the job may be left (read a pod's logs, delete it);
        run under the interrupt guard. Returns notes on what failed."""

    def fetch(self, job: JobSpec, job_id: str, local: Path | None) -> Fetched:
        """The job's folder here (copied when remote). Raises :class:`FetchError`."""

    def explain(self, job_id: str, watched: Watched) -> list[str]:
        """Lines for the report about how the job ended (why it could never start ...)."""


def wait_for_job(
    target: Target,
    job: JobSpec,
    policy: WaitPolicy,
    *,
    say: Progress,
    interrupts: Interrupts | None = None,
) -> JobEnded:
    """Submit ``job``, watch it to its end, and release it, under one interrupt guard.

    Interrupts are held from before the submission until the release, so a Ctrl-C
    while the job is submitted, watched or released still ends in its cancel/delete.
    ``interrupts``: a guard the caller holds already (the shards of one dispatch, each
    waited for in a thread of its own, share the main thread's).
    """
    scope = caught_interrupts() if interrupts is None else nullcontext(interrupts)
    with scope as interrupts:
        try:
            job_id = target.submit(job)
        except SubmitError as exc:
            found = target.find(job)
            if found is None:
                refused = JobOutcome.INTERRUPTED if interrupts else JobOutcome.SUBMIT_ERROR
                return JobEnded("", None, refused, [str(exc)])
            job_id = found  # accepted, but its id never reached us: watch it all the same
            say(f"submitting failed ({exc}) after the target accepted {target.label(job_id)}")
        say(target.submitted(job, job_id))
        watched = watch(target, job_id, policy, say=say, interrupts=interrupts)
        notes = _said_by_the_target(watched) + target.explain(job_id, watched)
        notes += target.release(job_id)
    return JobEnded(job_id, watched, watched.outcome, notes)


def _said_by_the_target(watched: Watched) -> list[str]:
    """The target's own words when it, not the tests, ended the job."""
    if watched.outcome in (JobOutcome.API_ERROR, JobOutcome.START_ERROR):
        return [watched.last.reason]
    return []


def run_job(
    target: Target,
    job: JobSpec,
    policy: WaitPolicy,
    *,
    say: Progress,
    local: Path | None,
    interrupts: Interrupts | None = None,
) -> DispatchResult:
    """:func:`wait_for_job`, then fetch the job's folder and merge every rank's results."""
    ended = wait_for_job(target, job, policy, say=say, interrupts=interrupts)
    result = DispatchResult.of(target.profile, ended)
    if ended.watched is None:
        return result
    try:
        fetched = target.fetch(job, ended.job_id, local)
    except FetchError as exc:
        result.add_message(f"could not fetch the job directory: {exc}")
        return result
    result.add_message(*fetched.notes)
    result.attach(fetched.folder, target.world_size)
    return result
