"""How one rank ended one test: the vocabulary of rank outcomes, and the record.

Standard library only: rank processes send these values back to the controller.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class OutcomeKind(str, enum.Enum):
    """A rank's outcome of one test (a str, so reports and JUnit show the plain word)."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    XFAILED = "xfailed"
    CRASHED = "crashed"
    """The rank's process died (a signal, os._exit) during the test."""
    HUNG = "hung"
    """Still running at the timeout, or after a peer failed; its stacks were dumped."""

    def __str__(self) -> str:
        return self.value


BAD = (OutcomeKind.CRASHED, OutcomeKind.FAILED, OutcomeKind.HUNG)
"""Bad outcomes, most likely root cause first."""


@dataclass(slots=True, kw_only=True)
class RankOutcome:
    """How one rank ended one test."""

    rank: int
    test_id: str
    """The node id of the test this outcome belongs to."""
    outcome: OutcomeKind
    detail: str = ""
    """Traceback, skip reason, or how the process died."""
    duration: float = 0.0
    stdout: str = ""
    stderr: str = ""
    stack: str = ""
    """The rank's Python stacks, dumped when the test timed out."""
    broke_group: bool = False
    """The rank failed with a process-group error: the group cannot be trusted again."""
    returned: str = ""
    """The type of what the test body returned, when not None (pytest warns of it)."""
    warnings: list[dict] = field(default_factory=list)
    """The warnings the body recorded (``rankwarnings.records``), to warn again in the
    controller."""
    ledger: list[dict] | None = None
    """The collectives the rank's test issued (``ledger.snapshot``), read when the test
    went wrong; None when there is none (the rank died, or the ledger is off)."""
    digest: dict | None = None
    """The ledger's digest (``ledger.digest``), sent with every result: where the ranks'
    digests differ, the controller asks for the ledgers themselves."""

    def __post_init__(self) -> None:
        self.outcome = OutcomeKind(self.outcome)  # ValueError names an unknown word
