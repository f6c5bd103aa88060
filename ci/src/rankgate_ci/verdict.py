"""Whether the release gate may publish: a pure function, tested offline.

It is the Dagger module's copy of ``rankgate.pipeline.executor.verdict`` with
``allow_skipped=False``: the module runs in the engine without rankgate installed.
ci/tests/test_dagger_module.py checks the two agree on every case.
"""

from __future__ import annotations

from typing import NamedTuple


class Gate(NamedTuple):
    """One gate's result in the release gate."""

    name: str
    status: str  # passed | failed | skipped
    reason: str


def refusal(gates: list[Gate], override: str) -> str:
    """Why publishing is refused ("" = publish). Failed or skipped gates refuse unless
    ``override`` gives a reason, which the caller prints."""
    blockers = [f"{g.name} {g.status}: {g.reason}" for g in gates if g.status != "passed"]
    if not blockers or override:
        return ""
    return (
        "release refused, nothing published: "
        + "; ".join(blockers)
        + ". Fix the gate, or pass --override 'REASON' to publish anyway (the reason is printed)."
    )


def render(gates: list[Gate]) -> str:
    width = max(len(g.name) for g in gates)
    rows = ["release gate:"]
    for gate in gates:
        shown = gate.status if gate.status == "passed" else gate.status.upper()
        rows.append(f"{gate.name:<{width}}  {shown:<7}  {gate.reason}".rstrip())
    return "\n".join(rows)
