"""Pool mode's reruns of a failed world test: each attempt on a fresh pool.

A failed attempt's pool is killed whatever state it is in (a failure may have left a
collective half done, a hang or a crash has broken it already), so the next attempt
runs on new processes in a new process group; the test's fixtures, made once in the
controller, are the same for every attempt (its ``tmp_path`` too).
"""

from __future__ import annotations

from rankgate.harness.attempts import Attempt, attempts_line
from rankgate.harness.outcome import BAD, RankOutcome
from rankgate.harness.verdict import Verdict


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
