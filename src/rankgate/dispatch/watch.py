"""Wait for a dispatched job: progress lines, deadlines, interrupts, and cancelling.

One loop serves every target. It polls ``observe()`` until the job reaches an
:class:`~rankgate.dispatch.outcome.Outcome`, and cancels the job itself when

- the target says the queued job can never start (outcome ``unschedulable``),
- it has been queued longer than ``queue_timeout_s`` (outcome ``queue-timeout``),
- it has been running longer than ``run_timeout_s`` (outcome ``run-timeout``),
- ``deadline_s`` has passed since submission (outcome ``deadline``), or
- SIGINT/SIGTERM arrived (outcome ``interrupted``): the job never outlives rankgate.

A look that fails with one of the ``transient`` errors (an ssh hiccup, an API answering
500) keeps the job in its phase, and the next look waits twice as long as the last
(``poll_s``, then 2x, 4x ... up to ``RETRY_MAX_S``), so a target that is struggling is
not asked ever faster; ``API_FAILURES`` of them in a row end the wait with outcome
``api-error`` and the last error as the reason.

Progress: a line on every change of phase or of the reason a job is queued, on a
failed look, and every ``PROGRESS_EVERY_S`` while nothing changes.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

from rankgate.dispatch.outcome import Outcome, Phase

Progress = Callable[[str], None]
PROGRESS_EVERY_S = 30.0
CANCEL_GRACE_S = 60.0
"""Seconds to wait for a job rankgate cancelled to reach a final state."""
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
    status: Phase | Outcome
    reason: str = ""
    exit_code: str = ""
    where: str = ""
    """Node(s) it runs on, when known."""
    never_starts: bool = False
    """The target says the queued job can never start as submitted (``reason`` says why)."""


@dataclass(slots=True)
class Watched:
    """How the wait ended."""

    last: Observation
    ours: Outcome | None
    """Set when rankgate itself ended the job (a timeout, deadline or interrupt)."""
    queued_s: float = 0.0
    running_s: float = 0.0
    why: str = ""
    """The target's reason when rankgate stopped a job that could never start."""

    @property
    def outcome(self) -> Outcome:
        if self.ours is not None:
            return self.ours
        return self.last.status if isinstance(self.last.status, Outcome) else Outcome.LOST


WAKE_S = 0.1
"""Slice of an interruptible sleep: how soon a poll notices a signal."""


class Interrupts:
    """SIGINT/SIGTERM received while a job is ours to clean up; true once any arrived."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def __bool__(self) -> bool:
        return bool(self.received)

    def arrived(self, signum: int, _frame=None) -> None:
        # Only a list append: a handler that took a lock (Event.set) could deadlock
        # when the signal lands while the main thread holds that same lock.
        self.received.append(signum)

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake within WAKE_S of a new signal (a poll of minutes stays responsive).

        time.sleep alone is resumed after a handler that does not raise (PEP 475).
        """
        before, end = len(self.received), time.monotonic() + seconds
        while len(self.received) == before and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, WAKE_S))


@contextmanager
def caught_interrupts() -> Iterator[Interrupts]:
    """Collect SIGINT/SIGTERM received inside the block instead of dying (main thread only).

    Held from before a submission until the job is cleaned up, so an interrupt that
    arrives while sbatch or the API call runs, or while logs are fetched, still ends
    in a cancel and a delete instead of an orphaned job.
    """
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = {
        sig: signal.signal(sig, interrupts.arrived) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield interrupts
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def watch(
    observe: Callable[[], Observation],
    cancel: Callable[[], None],
    *,
    label: str,
    poll_s: float,
    say: Progress,
    deadline_s: float | None = None,
    queue_timeout_s: float | None = None,
    run_timeout_s: float | None = None,
    wait_after_cancel: bool = True,
    transient: tuple[type[Exception], ...] = (),
    interrupts: Interrupts | None = None,
) -> Watched:
    """Poll until the job ends (see the module docstring); never raises for the job's sake.

    ``interrupts``: the caller's :func:`caught_interrupts`, when it already holds one
    around the submission; otherwise the wait catches its own.
    """
    start = time.monotonic()
    result = Watched(last=Observation("SUBMITTED", Phase.QUEUED), ours=None)
    phase, phase_start, last_said, cancelled_at, failures = None, start, start, 0.0, 0
    reason = ""

    def account(now: float) -> None:
        if phase is Phase.QUEUED:
            result.queued_s += now - phase_start
        elif phase is Phase.RUNNING:
            result.running_s += now - phase_start

    scope = caught_interrupts() if interrupts is None else nullcontext(interrupts)
    with scope as interrupted:
        while True:
            try:
                seen = observe()
                failures = 0
            except transient as exc:
                failures += 1
                if failures >= API_FAILURES:
                    seen = Observation("no answer", Outcome.API_ERROR, str(exc))
                else:
                    seen = Observation(result.last.state, phase or Phase.QUEUED, reason)
                    say(
                        f"{label}: look {failures} failed ({exc}); next in "
                        f"{retry_delay(poll_s, failures):g} s"
                    )
            result.last = seen
            now = time.monotonic()
            if isinstance(seen.status, Outcome):
                account(now)
                say(f"{label}: {seen.state} after {now - start:.0f} s")
                return result
            if seen.status is not phase:
                account(now)
                phase, phase_start, last_said = seen.status, now, now
                where = f" on {seen.where}" if seen.where and phase is Phase.RUNNING else ""
                why = f" ({seen.reason})" if seen.reason and seen.reason != "None" else ""
                say(f"{label}: {phase.value}{where}{why}")
            elif phase is Phase.QUEUED and seen.reason not in (reason, "", "None") and not failures:
                last_said = now
                say(f"{label}: {phase.value} ({seen.reason})")
            elif now - last_said >= PROGRESS_EVERY_S:
                last_said = now
                say(f"{label}: still {phase.value} after {now - phase_start:.0f} s")
            reason = seen.reason
            if result.ours is None:
                result.ours = _reason_to_stop(
                    seen,
                    phase,
                    now - start,
                    now - phase_start,
                    interrupted,
                    deadline_s,
                    queue_timeout_s,
                    run_timeout_s,
                )
                if result.ours is not None:
                    result.why = seen.reason if result.ours is Outcome.UNSCHEDULABLE else ""
                    say(f"{label}: {result.ours.value}, cancelling")
                    try:
                        cancel()
                    except transient as exc:
                        say(f"{label}: cancelling failed: {exc}")
                    cancelled_at = now
                    if not wait_after_cancel:
                        account(now)
                        return result
            elif now - cancelled_at > CANCEL_GRACE_S:
                account(now)
                say(f"{label}: still {seen.state} {CANCEL_GRACE_S:g} s after cancelling")
                return result
            if failures:
                interrupted.sleep(retry_delay(poll_s, failures))
            else:
                interrupted.sleep(poll_s if result.ours is None else min(poll_s, 0.5))


def _reason_to_stop(seen, phase, total, in_phase, interrupted, deadline, queue_limit, run_limit):
    if interrupted:
        return Outcome.INTERRUPTED
    if phase is Phase.QUEUED and seen.never_starts:
        return Outcome.UNSCHEDULABLE
    if queue_limit is not None and phase is Phase.QUEUED and in_phase > queue_limit:
        return Outcome.QUEUE_TIMEOUT
    if run_limit is not None and phase is Phase.RUNNING and in_phase > run_limit:
        return Outcome.RUN_TIMEOUT
    if deadline is not None and total > deadline:
        return Outcome.DEADLINE
    return None
