"""How a dispatched job ended, before its results are fetched: the record that the
round trip (:mod:`rankgate.dispatch.target`) hands to the results
(:mod:`rankgate.dispatch.job_result`), kept apart so neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field

from rankgate.dispatch.job_outcome import JobOutcome
from rankgate.dispatch.watch import Observation, Watched


@dataclass(slots=True)
class JobEnded:
    """How a dispatched job ended, before its results are fetched."""

    job_id: str
    """The target's id of the job; empty when it was never accepted."""
    watched: Watched | None
    """The wait; None when the job was never accepted."""
    outcome: JobOutcome
    notes: list[str] = field(default_factory=list)
    """Lines for the report: the submit error, the target's explanation, cleanup trouble."""

    @property
    def last(self) -> Observation | None:
        return self.watched.last if self.watched else None
