"""Skipped and expected-failure tests grouped by reason, with a count and an example.

Reasons that differ only in their numbers fold into one line, each number slot
showing the values seen: ``world(4, backend='nccl') needs 4 GPUs; 2 visible`` and
``world(8, ...) needs 8 GPUs; 2 visible`` become one group of
``world(4/8, backend='nccl') needs 4/8 GPUs; 2 visible``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from rankgate.report.results import TestResult

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
EXAMPLES = 3
"""Test ids kept per group (the first is the example shown)."""


@dataclass(frozen=True, slots=True)
class ReasonGroup:
    reason: str
    """The shared reason, number slots joined with '/' where they differ."""
    count: int
    tests: tuple[str, ...]
    """The first :data:`EXAMPLES` test ids."""

    def to_json(self) -> dict:
        return {"reason": self.reason, "count": self.count, "examples": list(self.tests)}


def group_reasons(results: Iterable[TestResult], outcome: str = "skipped") -> list[ReasonGroup]:
    """The tests of ``outcome`` grouped by reason, the largest group first."""
    groups: dict[str, list[TestResult]] = {}
    for r in results:
        if r.outcome == outcome:
            groups.setdefault(_NUMBER.sub("#", r.reason or "no reason given"), []).append(r)
    found = [
        ReasonGroup(reason=_merged_reason([r.reason or "no reason given" for r in members]),
                    count=len(members), tests=tuple(r.id for r in members[:EXAMPLES]))
        for members in groups.values()
    ]  # fmt: skip
    return sorted(found, key=lambda g: -g.count)


def _merged_reason(reasons: list[str]) -> str:
    """One reason text; each number slot lists the distinct values seen, in order."""
    first = reasons[0]
    slots: list[list[str]] = [[] for _ in _NUMBER.finditer(first)]
    for reason in reasons:
        for values, match in zip(slots, _NUMBER.finditer(reason)):
            if match.group(0) not in values:
                values.append(match.group(0))
    pieces, last = [], 0
    for values, match in zip(slots, _NUMBER.finditer(first)):
        pieces += [first[last : match.start()], "/".join(_sorted_numbers(values))]
        last = match.end()
    return "".join(pieces) + first[last:]


def _sorted_numbers(values: list[str]) -> list[str]:
    return sorted(values, key=float)
