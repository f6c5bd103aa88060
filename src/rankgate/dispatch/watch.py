"""Wait for a dispatched job: progress lines, deadlines, interrupts, and cancelling.

One loop, :func:`watch`, serves every target. It looks at the job (``observe``) until it
reaches a :class:`~rankgate.dispatch.job_outcome.JobOutcome`, and cancels the job itself when

- the target says the queued job can never start (outcome ``unschedulable``),
- it has been queued longer than the policy's ``queue_timeout_s`` (``queue-timeout``),
- it has been running longer than ``run_timeout_s`` (``run-timeout``),
- ``deadline_s`` has passed since submission (``deadline``), or
- SIGINT/SIGTERM arrived (``interrupted``): the job never outlives rankgate.

How long and how often is one :class:`WaitPolicy`, built once per dispatch.

A look that fails with one of the target's ``transient`` errors (an ssh hiccup, an API
answering 500) keeps the job in its phase, and the next look waits twice as long as the
last (``poll_s``, then 2x, 4x ... up to ``RETRY_MAX_S``), so a target that is struggling
is not asked ever faster; ``API_FAILURES`` of them in a row end the wait with outcome
``api-error`` and the last error as the reason.

Progress: a line on every change of phase or of the reason a job is queued, on a
failed look, and every ``PROGRESS_EVERY_S`` while nothing changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Protocol

from rankgate.dispatch.interrupts import Interrupts, caught_interrupts
from rankgate.dispatch.job_outcome import JobOutcome, Phase

Progress = Callable[[str], None]
PROGRESS_EVERY_S = 30.0
CANCEL_GRACE_S = 60.0
"""Seconds to wait for a job rankgate cancelled to reach a final state."""
CANCEL_POLL_S = 0.5
"""Longest pause between looks at a job rankgate cancelled."""
API_FAILURES = 5
"""Consecutive failed looks (ssh down, API erroring) before the outcome is api-error."""
RETRY_MAX_S = 60.0
"""Longest wait after a failed look (the back-off doubles up to it)."""


def retry_delay(poll_s: float, failures: int) -> float:
    """Seconds before the next look after ``failures`` failed looks in a row."""
    return min(poll_s * 2 ** max(failures - 1, 0), max(RETRY_MAX_S, poll_s))


@dataclass(frozen=True, slots=True)
class Observation:
    """One look at a job."""

    state: str
    """The target's own word for it (SLURM state, container state), verbatim."""
    status: Phase | JobOutcome
    reason: str = ""
    exit_code: str = ""
    where: str = ""
    """Node(s) it runs on, when known."""
    never_starts: bool = False
    """The target says the queued job can never start as submitted (``reason`` says why)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitPolicy:
    """How long rankgate waits for a job and how often it looks; built once per dispatch
    (:func:`rankgate.dispatch.run.wait_policy`: the target's defaults, then the flags)."""

    poll_s: float = 2.0
    """Seconds between looks; failed looks back off from here."""
    deadline_s: float | None = None
    """Cancel the job this long after submission, whatever its phase."""
    queue_timeout_s: float | None = None
    """Cancel the job when it has been queued this long."""
    run_timeout_s: float | None = None
    """Cancel the job when it has been running this long."""

    def __post_init__(self) -> None:
        if self.poll_s <= 0:
            raise ValueError(f"poll interval must be > 0 seconds, got {self.poll_s}")

    def reason_to_stop(
        self, seen: Observation, phase: Phase, total: float, in_phase: float
    ) -> JobOutcome | None:
        """Why rankgate should end the job now (None: let it go on)."""
        if phase is Phase.QUEUED and seen.never_starts:
            return JobOutcome.UNSCHEDULABLE
        limit = self.queue_timeout_s if phase is Phase.QUEUED else self.run_timeout_s
        if limit is not None and in_phase > limit:
            return JobOutcome.QUEUE_TIMEOUT if phase is Phase.QUEUED else JobOutcome.RUN_TIMEOUT
        if self.deadline_s is not None and total > self.deadline_s:
            return JobOutcome.DEADLINE
        return None


class Watchable(Protocol):
    """What the wait needs of a target (:class:`rankgate.dispatch.target.Target`)."""

    transient: tuple[type[Exception], ...]
    """Errors of a look or a cancel that do not end the wait (ssh, HTTP 5xx ...)."""
    settles_after_cancel: bool
    """True: after a cancel, look until the job reaches a final state (SLURM); False:
    return at once, the job is cleaned up afterwards (an interLink pod is deleted)."""

    def label(self, job_id: str) -> str: ...

    def observe(self, job_id: str) -> Observation: ...

    def cancel(self, job_id: str) -> None: ...


@dataclass(slots=True)
class Watched:
    """How the wait ended."""

    last: Observation
    ours: JobOutcome | None
    """Set when rankgate itself ended the job (a timeout, deadline or interrupt)."""
    queued_s: float = 0.0
    running_s: float = 0.0
    why: str = ""
    """The target's reason when rankgate stopped a job that could never start."""
    where: str = ""
    """The node(s) the job last ran on, as the target named them ("" if never said)."""

    @property
    def outcome(self) -> JobOutcome:
        if self.ours is not None:
            return self.ours
        if isinstance(self.last.status, JobOutcome):
            return self.last.status
        return JobOutcome.LOST


def watch(
    target: Watchable,
    job_id: str,
    policy: WaitPolicy,
    *,
    say: Progress,
    interrupts: Interrupts | None = None,
) -> Watched:
    """Look at ``job_id`` until it ends (see the module docstring); never raises for it.

    ``interrupts``: the caller's :func:`caught_interrupts`, when it already holds one
    around the submission; otherwise the wait catches its own.
    """
    scope = caught_interrupts() if interrupts is None else nullcontext(interrupts)
    with scope as interrupted:
        return _Wait(target, job_id, policy, say, interrupted).run()


class _Wait:
    """The state of one :func:`watch`: the phase, its clock, failed looks, the cancel."""

    def __init__(self, target, job_id, policy, say, interrupted) -> None:
        self.target, self.job_id, self.policy = target, job_id, policy
        self.say, self.interrupted = say, interrupted
        self.label = target.label(job_id)
        self.start = self.phase_start = self.last_said = time.monotonic()
        self.phase: Phase | None = None
        self.reason, self.failures, self.cancelled_at = "", 0, 0.0
        self.result = Watched(last=Observation("SUBMITTED", Phase.QUEUED), ours=None)

    def run(self) -> Watched:
        while True:
            seen = self.result.last = self._look()
            self.result.where = seen.where or self.result.where
            now = time.monotonic()
            if isinstance(seen.status, JobOutcome):
                self._account(now)
                self.say(f"{self.label}: {seen.state} after {now - self.start:.0f} s")
                return self.result
            self._progress(seen, now)
            if self.result.ours is None:
                if self._stop_if_due(seen, now) and not self.target.settles_after_cancel:
                    self._account(now)
                    return self.result
            elif now - self.cancelled_at > CANCEL_GRACE_S:
                self._account(now)
                self.say(f"{self.label}: still {seen.state} {CANCEL_GRACE_S:g} s after cancelling")
                return self.result
            self.interrupted.sleep(self._pause())

    def _look(self) -> Observation:
        try:
            seen = self.target.observe(self.job_id)
        except self.target.transient as exc:
            self.failures += 1
            if self.failures >= API_FAILURES:
                return Observation("no answer", JobOutcome.API_ERROR, str(exc))
            delay = retry_delay(self.policy.poll_s, self.failures)
            self.say(f"{self.label}: look {self.failures} failed ({exc}); next in {delay:g} s")
            return Observation(self.result.last.state, self.phase or Phase.QUEUED, self.reason)
        self.failures = 0
        return seen

    def _progress(self, seen: Observation, now: float) -> None:
        """A line on a new phase or queue reason, or when nothing was said for a while."""
        if seen.status is not self.phase:
            self._account(now)
            self.phase, self.phase_start, self.last_said = seen.status, now, now
            where = f" on {seen.where}" if seen.where and self.phase is Phase.RUNNING else ""
            why = f" ({seen.reason})" if seen.reason and seen.reason != "None" else ""
            self.say(f"{self.label}: {self.phase.value}{where}{why}")
        elif self.phase is Phase.QUEUED and seen.reason not in (self.reason, "", "None"):
            self.last_said = now
            self.say(f"{self.label}: {self.phase.value} ({seen.reason})")
        elif now - self.last_said >= PROGRESS_EVERY_S:
            self.last_said = now
            self.say(f"{self.label}: still {self.phase.value} after {now - self.phase_start:.0f} s")
        self.reason = seen.reason

    def _stop_if_due(self, seen: Observation, now: float) -> bool:
        """Cancel the job when the policy or an interrupt says so; True if it did."""
        assert self.phase is not None  # set by _progress
        ours = (
            JobOutcome.INTERRUPTED
            if self.interrupted
            else self.policy.reason_to_stop(
                seen, self.phase, now - self.start, now - self.phase_start
            )
        )
        if ours is None:
            return False
        self.result.ours = ours
        self.result.why = seen.reason if ours is JobOutcome.UNSCHEDULABLE else ""
        self.say(f"{self.label}: {ours.value}, cancelling")
        try:
            self.target.cancel(self.job_id)
        except self.target.transient as exc:
            self.say(f"{self.label}: cancelling failed: {exc}")
        self.cancelled_at = now
        return True

    def _pause(self) -> float:
        if self.failures:
            return retry_delay(self.policy.poll_s, self.failures)
        if self.result.ours is not None:
            return min(self.policy.poll_s, CANCEL_POLL_S)
        return self.policy.poll_s

    def _account(self, now: float) -> None:
        if self.phase is Phase.QUEUED:
            self.result.queued_s += now - self.phase_start
        elif self.phase is Phase.RUNNING:
            self.result.running_s += now - self.phase_start
