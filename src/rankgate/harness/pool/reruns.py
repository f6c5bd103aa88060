"""Pool mode's reruns of a failed world test: each attempt on a fresh pool.

A failed attempt's pool is killed whatever state it is in (a failure may have left a
collective half done, a hang or a crash has broken it already), so the next attempt
runs on new processes in a new process group; the test's fixtures, made once in the
controller, are the same for every attempt (its ``tmp_path`` too).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from rankgate.harness.attempts import RERUN_KEYS, Attempt, attempts_line
from rankgate.harness.outcome import BAD, RankOutcome
from rankgate.harness.pool.pool import Pool
from rankgate.harness.pool.worldrun import WorldRun
from rankgate.harness.verdict import Verdict, judge


def run_attempts(
    run: WorldRun, pool: Pool, reruns: int, fresh_pool: Callable[[], Pool], test_id: str
) -> Verdict:
    """Run ``run``'s task on ``pool``, and again on ``fresh_pool()`` after a failure
    while ``reruns`` are left; returns the verdict, the last attempt's unless every
    attempt failed (then the first's, whose summary names what failed first)."""
    while True:
        run.outcomes = pool.run(run.task, run.timeout)
        run.verdict = judge(run.outcomes, run.world, run.backend, test_id=test_id)
        run.attempt_verdicts.append(run.verdict)
        number = len(run.attempt_verdicts)
        run.attempts.append(attempt_of(number, run.verdict, run.outcomes))
        if run.verdict.status not in RERUN_KEYS or number > reruns:
            break
        pool.kill()  # never the broken world again: new processes, a new group
        pool = fresh_pool()  # its set-up first: a failure there raises, run says so
    if number == 1:
        run.attempts, run.attempt_verdicts = [], []
        return run.verdict
    if run.verdict.status == "failed":
        first = run.attempt_verdicts[0]
        summary = f"{first.summary}; failed {number} of {number} attempts"
        run.verdict = dataclasses.replace(
            first,
            summary=summary,
            text=summary + "\n" + every_attempt_text(run.attempt_verdicts, run.attempts),
        )
    return run.verdict


def attempt_of(number: int, verdict: Verdict, outcomes: list[RankOutcome]) -> Attempt:
    """The record of one attempt: its verdict, every rank's outcome, the bad ranks' texts."""
    errors = {}
    for o in outcomes:
        if o.outcome in BAD:
            text = o.detail.rstrip()
            if o.stack:
                text += "\nPython stacks of every thread (faulthandler):\n" + o.stack.rstrip()
            errors[o.rank] = text
    return Attempt(
        number=number,
        verdict=verdict.status,
        summary=verdict.summary,
        ranks={o.rank: str(o.outcome) for o in outcomes},
        errors=errors,
    )


def every_attempt_text(verdicts: list[Verdict], attempts: list[Attempt]) -> str:
    """The failure text of a test run more than once: each attempt's whole verdict text,
    the first first, so a rerun never hides the first failure."""
    parts = []
    for verdict, attempt in zip(verdicts, attempts, strict=True):
        parts.append(f"{f' attempt {attempt.number}: {attempt.verdict} ':=^72}")
        parts.append(verdict.text.rstrip() or verdict.summary or attempt.verdict)
    return f"attempts: {attempts_line(attempts)}\n" + "\n".join(parts) + "\n"
