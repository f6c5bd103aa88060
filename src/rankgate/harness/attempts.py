"""Reruns of a failed world test (``--rankgate-reruns``): the record of every attempt.

A world test that failed (on any rank: a failure, a crash, a hang) runs again on a fresh
world, up to ``reruns`` more times. Each attempt's verdict, every rank's outcome and the
failing ranks' texts are kept; a test that fails and then passes is *flaky*. The record
crosses files as one JSON property of the test's JUnit case (:data:`ATTEMPTS_PROPERTY`),
which merge-junit and the report read back with :func:`decode`.

Standard library only: both wings of the harness and the report read it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

ATTEMPTS_PROPERTY = "rankgate.attempts"
"""A JSON list of every attempt (:meth:`Attempt.to_json`), on a test run more than once."""
FLAKY_PROPERTY = "rankgate.flaky"
"""On a test that failed and then passed a rerun: the policy's word, ``pass`` or ``fail``."""
FLAKY_POLICIES = ("pass", "fail")
"""``--rankgate-flaky``: a flaky test passes (counted apart), or fails the run."""
ERROR_CHARS = 2000
"""Each failing rank's text in the JUnit property is cut to its last this many characters
(the terminal and the failure text keep the whole of the first failure)."""
RERUN_KEYS = frozenset({"failed"})
"""Verdicts that are rerun: ``failed`` covers a rank that failed, crashed or hung."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One run of one world test."""

    number: int
    """1 for the first run, 2 for the first rerun, ..."""
    verdict: str
    """passed, failed, skipped, xfailed or disagreement, as the verdict said it."""
    summary: str = ""
    """The verdict's one line ("rank 1 failed; rank 0 passed (world 2, backend gloo)")."""
    ranks: dict[int, str] = field(default_factory=dict)
    """Each rank's outcome (passed, failed, crashed, hung, ...)."""
    errors: dict[int, str] = field(default_factory=dict)
    """Each failing rank's text (traceback, stacks, how it died)."""

    def to_json(self) -> dict:
        return {
            "attempt": self.number,
            "verdict": self.verdict,
            "summary": self.summary,
            "ranks": {str(r): o for r, o in sorted(self.ranks.items())},
            "errors": {str(r): _tail(t) for r, t in sorted(self.errors.items())},
        }

    @classmethod
    def from_json(cls, data: dict) -> Attempt:
        return cls(
            number=int(data["attempt"]),
            verdict=str(data["verdict"]),
            summary=str(data.get("summary", "")),
            ranks={int(r): str(o) for r, o in dict(data.get("ranks", {})).items()},
            errors={int(r): str(t) for r, t in dict(data.get("errors", {})).items()},
        )

    def line(self) -> str:
        """ "attempt 1 failed: rank 1 failed; rank 0 passed (world 2, backend gloo)"."""
        said = f": {self.summary}" if self.summary and self.verdict != "passed" else ""
        return f"attempt {self.number} {self.verdict}{said}"


def _tail(text: str) -> str:
    return text if len(text) <= ERROR_CHARS else "…" + text[-(ERROR_CHARS - 1) :]


def encode(attempts: list[Attempt]) -> str:
    return json.dumps([a.to_json() for a in attempts], sort_keys=True)


def decode(text: str) -> list[Attempt]:
    """The attempts a property holds; [] for a value that is not such a list (a file of
    another tool that happens to use the name)."""
    try:
        return [Attempt.from_json(d) for d in json.loads(text)]
    except (ValueError, TypeError, KeyError, AttributeError):
        return []


def is_flaky(attempts: list[Attempt]) -> bool:
    """Failed at first, passed at last."""
    return len(attempts) > 1 and attempts[-1].verdict == "passed"


def attempts_line(attempts: list[Attempt]) -> str:
    """ "attempt 1 failed, attempt 2 passed" (verdicts only)."""
    return ", ".join(f"attempt {a.number} {a.verdict}" for a in attempts)


def attempts_text(attempts: list[Attempt]) -> str:
    """Every attempt: its line, then each failing rank's text."""
    parts = []
    for a in attempts:
        parts.append(f"{f' {a.line()} ':=^72}")
        parts += [f"--- rank {r} ---\n{t.rstrip()}" for r, t in sorted(a.errors.items())]
    return "\n".join(parts) + "\n"


def flaky_summary(attempts: list[Attempt], policy: str) -> str:
    """The line a flaky test's report carries."""
    ends = "fails the run (--rankgate-flaky=fail)" if policy == "fail" else "counted as flaky"
    return f"flaky: {attempts_line(attempts)}; {ends}"
