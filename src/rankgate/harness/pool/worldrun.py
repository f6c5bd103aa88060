"""What the controller knows of one world test in the pool, from its set-up to its report.

Its set-up (``session``) fixes the pool it runs on, its seed and its timeout; the call
phase (``reruns``) adds each attempt's outcomes and verdict; the report reads them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rankgate.harness.attempts import Attempt
from rankgate.harness.outcome import RankOutcome
from rankgate.harness.pool.messages import TestTask
from rankgate.harness.pool.pool import PoolKey
from rankgate.harness.verdict import Verdict


@dataclass(slots=True, kw_only=True)
class WorldRun:
    """What the controller knows about one world test while reporting it."""

    world: int
    backend: str
    seed: int
    base_seed: int
    timeout: float = 0.0
    """Each attempt's (``item_settings.test_timeout``), fixed at set-up."""
    key: PoolKey | None = None
    task: TestTask | None = None
    outcomes: list[RankOutcome] | None = None
    verdict: Verdict | None = None
    attempts: list[Attempt] = dataclasses.field(default_factory=list)
    """Every attempt, when the test ran more than once (``--rankgate-reruns``)."""
    attempt_verdicts: list[Verdict] = dataclasses.field(default_factory=list)
    """Each attempt's whole verdict, alongside ``attempts``."""
