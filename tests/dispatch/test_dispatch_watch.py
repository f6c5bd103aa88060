"""The shared wait loop: phases, deadlines of each kind, interrupts, and the cancel grace."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time

import pytest

from rankgate.dispatch.interrupts import caught_interrupts
from rankgate.dispatch.job_outcome import JobOutcome, Phase
from rankgate.dispatch.watch import RETRY_MAX_S, Observation, WaitPolicy, retry_delay, watch

pytestmark = pytest.mark.unit

QUEUED = Observation("PENDING", Phase.QUEUED, reason="Priority")
RUNNING = Observation("RUNNING", Phase.RUNNING, where="node1")
CANCELLED = Observation("CANCELLED", JobOutcome.CANCELLED)


class Job:
    """A scripted target with one job: observations in order, the last one repeated;
    cancel ends it. ``fail``: raise it from every look once the script is used up."""

    transient = (ConnectionError,)

    def __init__(self, *seen: Observation, cancelled=CANCELLED, settles=True, fail=None):
        self.seen, self.cancelled, self.cancels = list(seen), cancelled, 0
        self.settles_after_cancel, self.fail, self.looks = settles, fail, 0

    def label(self, job_id: str) -> str:
        return f"job {job_id}"

    def observe(self, job_id: str) -> Observation:
        self.looks += 1
        if self.cancels and self.cancelled is not None:
            return self.cancelled
        if self.fail is not None and not self.seen:
            raise self.fail
        if self.fail is not None or len(self.seen) > 1:
            return self.seen.pop(0)
        return self.seen[0]

    def cancel(self, job_id: str) -> None:
        self.cancels += 1


def _watch(job: Job, lines: list[str] | None = None, poll_s: float = 0.01, **limits):
    lines = [] if lines is None else lines
    return watch(job, "1", WaitPolicy(poll_s=poll_s, **limits), say=lines.append)


def test_runs_to_completion_with_a_line_per_phase():
    lines: list[str] = []
    job = Job(
        QUEUED, RUNNING, RUNNING, Observation("COMPLETED", JobOutcome.COMPLETED, exit_code="0:0")
    )
    waited = _watch(job, lines)
    assert waited.outcome is JobOutcome.COMPLETED and job.cancels == 0
    assert lines == [
        "job 1: queued (Priority)",
        "job 1: running on node1",
        "job 1: COMPLETED after 0 s",
    ]


@pytest.mark.parametrize(
    ("seen", "limits", "expected"),
    [
        ((QUEUED,), {"queue_timeout_s": 0.05}, JobOutcome.QUEUE_TIMEOUT),
        ((QUEUED, RUNNING), {"queue_timeout_s": 60, "run_timeout_s": 0.05}, JobOutcome.RUN_TIMEOUT),
        ((QUEUED,), {"deadline_s": 0.05}, JobOutcome.DEADLINE),
    ],
)
def test_each_limit_cancels_with_its_own_outcome(seen, limits, expected):
    job = Job(*seen)
    waited = _watch(job, **limits)
    assert (waited.outcome, job.cancels) == (expected, 1)
    assert waited.last.state == "CANCELLED"  # it kept polling until the job really ended


def test_a_job_that_can_never_start_is_cancelled_with_the_reason():
    stuck = Observation("PENDING", Phase.QUEUED, reason="PartitionConfig", never_starts=True)
    lines: list[str] = []
    job = Job(QUEUED, stuck)
    waited = _watch(job, lines, queue_timeout_s=3600)
    assert (waited.outcome, waited.why, job.cancels) == (
        JobOutcome.UNSCHEDULABLE,
        "PartitionConfig",
        1,
    )
    assert lines[-2:] == ["job 1: unschedulable, cancelling", "job 1: CANCELLED after 0 s"]


def test_queue_time_does_not_count_against_the_run_limit():
    job = Job(*([QUEUED] * 20), RUNNING, Observation("COMPLETED", JobOutcome.COMPLETED))
    waited = _watch(job, run_timeout_s=0.15)
    assert waited.outcome is JobOutcome.COMPLETED and waited.queued_s > 0.1


@pytest.fixture
def sigint_found():
    """SIGINT's handler as the test found it: Python's default, or SIG_IGN when the
    run was started with SIGINT ignored (``nohup``, ``trap '' INT``, a background job)."""
    return signal.getsignal(signal.SIGINT)


class InterruptedWhileQueued(Job):
    """Sends itself ``signum`` (SIGINT unless told) at each look until it is cancelled."""

    signum = signal.SIGINT

    def observe(self, job_id: str) -> Observation:
        if not self.cancels:
            os.kill(os.getpid(), self.signum)
        return super().observe(job_id)


def test_sigint_cancels_the_job_instead_of_leaving_it_queued(sigint_found):
    job = InterruptedWhileQueued(QUEUED)
    waited = _watch(job)
    assert (waited.outcome, job.cancels) == (JobOutcome.INTERRUPTED, 1)
    assert signal.getsignal(signal.SIGINT) is sigint_found  # put back as it was


def test_sigint_wakes_a_long_poll_sleep():
    # A poll of a minute must not keep a Ctrl-C waiting for the next look.
    job = Job(QUEUED)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        waited = _watch(job, poll_s=60)
    finally:
        timer.cancel()
    assert (waited.outcome, job.cancels) == (JobOutcome.INTERRUPTED, 1)
    assert time.monotonic() - start < 5


def test_interrupts_held_by_the_caller_reach_the_wait(sigint_found):
    # An interrupt that arrived while the job was being submitted cancels it at once.
    job = Job(QUEUED)
    with caught_interrupts() as interrupts:
        os.kill(os.getpid(), signal.SIGINT)
        waited = watch(job, "1", WaitPolicy(poll_s=60), say=lambda _: None, interrupts=interrupts)
    assert (waited.outcome, job.cancels) == (JobOutcome.INTERRUPTED, 1)
    assert signal.getsignal(signal.SIGINT) is sigint_found


class Stopped(Exception):
    pass


def test_a_handler_of_the_callers_own_gets_the_signal_once_the_job_is_cancelled():
    # The guard holds SIGTERM back while the job is ours; a caller that ends on it (a
    # pytest session) must then end, not go on to its next test.
    job = InterruptedWhileQueued(QUEUED)
    job.signum = signal.SIGTERM
    told = []

    def stop(signum, frame):
        told.append((signum, job.cancels))
        raise Stopped

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(Stopped):
            _watch(job)
        assert signal.getsignal(signal.SIGTERM) is stop
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert told == [(signal.SIGTERM, 1)]  # once, and after the cancel


PLANTED_SESSION = """
import os
import signal

from rankgate.dispatch.job_outcome import JobOutcome, Phase
from rankgate.dispatch.watch import Observation, WaitPolicy, watch


class Job:
    transient = ()
    settles_after_cancel = True
    cancels = 0

    def label(self, job_id):
        return f"job {job_id}"

    def observe(self, job_id):
        if self.cancels:
            return Observation("CANCELLED", JobOutcome.CANCELLED)
        os.kill(os.getpid(), signal.SIGTERM)
        return Observation("PENDING", Phase.QUEUED, reason="Priority")

    def cancel(self, job_id):
        self.cancels += 1
        print("cancelled", job_id)


def test_dispatches():
    watch(Job(), "7", WaitPolicy(poll_s=0.01), say=print)


def test_next():
    print("the session went on")
"""


def test_sigterm_during_a_dispatch_ends_the_pytest_session_after_the_cancel(pytester):
    pytester.makepyfile(test_planted=PLANTED_SESSION)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s")
    assert result.ret == 128 + signal.SIGTERM
    result.stdout.fnmatch_lines(["*cancelled 7*", "*rankgate: received SIGTERM*"])
    result.stdout.no_fnmatch_line("*the session went on*")


def test_without_waiting_after_cancel_it_returns_at_once():
    job = Job(RUNNING, cancelled=None, settles=False)
    waited = _watch(job, run_timeout_s=0.02)
    assert waited.outcome is JobOutcome.RUN_TIMEOUT and waited.last.state == "RUNNING"


def test_failed_looks_keep_the_phase_then_become_api_error():
    job = Job(
        QUEUED, RUNNING, fail=ConnectionError("ssh: connect to host login: Connection refused")
    )
    lines: list[str] = []
    waited = _watch(job, lines)
    assert waited.outcome is JobOutcome.API_ERROR and "Connection refused" in waited.last.reason
    assert job.looks == 2 + 5 and lines[:2] == [
        "job 1: queued (Priority)",
        "job 1: running on node1",
    ]
    assert waited.running_s > 0  # the failed looks counted as running, not as a new phase


class TimedFailures(Job):
    """Every look fails; remembers when each was made."""

    def __init__(self):
        super().__init__(fail=ConnectionError("Connection refused"))
        self.times: list[float] = []

    def observe(self, job_id: str) -> Observation:
        self.times.append(time.monotonic())
        return super().observe(job_id)


def test_failed_looks_back_off_instead_of_retrying_at_a_fixed_interval():
    job = TimedFailures()
    lines: list[str] = []
    waited = _watch(job, lines, poll_s=0.05)
    assert waited.outcome is JobOutcome.API_ERROR
    gaps = [b - a for a, b in itertools.pairwise(job.times)]
    # Each wait is twice the last (a sleep never ends early, so these lower bounds hold
    # however loaded the machine is); a fixed interval would be 0.05 s every time.
    assert len(gaps) == 4 and all(gap >= want for gap, want in zip(gaps, [0.05, 0.1, 0.2, 0.4]))
    assert [line for line in lines if " look " in line] == [
        f"job 1: look {n} failed (Connection refused); next in {delay:g} s"
        for n, delay in zip(range(1, 5), [0.05, 0.1, 0.2, 0.4])
    ]


def test_the_back_off_is_capped():
    assert [retry_delay(10, n) for n in range(1, 6)] == [10, 20, 40, RETRY_MAX_S, RETRY_MAX_S]
    assert retry_delay(120, 3) == 120  # never shorter than the poll itself


def test_a_new_queue_reason_gets_its_own_line():
    lines: list[str] = []
    job = Job(
        QUEUED,
        Observation("PENDING", Phase.QUEUED, reason="Resources"),
        Observation("PENDING", Phase.QUEUED, reason="Resources"),
        RUNNING,
        Observation("COMPLETED", JobOutcome.COMPLETED),
    )
    _watch(job, lines)
    assert lines[:3] == [
        "job 1: queued (Priority)",
        "job 1: queued (Resources)",
        "job 1: running on node1",
    ]
