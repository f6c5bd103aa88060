"""The gate's verdict table: one row per stage, its failed tests under it."""

from __future__ import annotations

from rankgate.pipeline.stage_outcome import Outcome

FAILING_SHOWN = 10
"""The table names at most this many failed tests of a stage."""


def summary_table(outcomes: list[Outcome]) -> str:
    """Plain-text table: one row per stage; rows that did not pass in capitals."""
    statuses = ("passed", "failed", "incomplete", "skipped")
    counts = {s: sum(o.status == s for o in outcomes) for s in statuses}
    width = max([len(o.stage) for o in outcomes] + [5])
    lines = [
        "",
        f"{'stage':<{width}}  {'result':<7}  {'time':>7}  reason / note",
        f"{'-' * width}  {'-' * 7}  {'-' * 7}  {'-' * 40}",
    ]
    for o in outcomes:
        shown = o.status if o.status == "passed" else o.status.upper()
        note = o.reason
        if o.selected and o.selected != o.reason:
            note = "; ".join(filter(None, (o.reason, f"ran: {o.selected}")))
        if o.coverage is not None:
            note = "; ".join(filter(None, (note, f"coverage {o.coverage:.1f}%")))
        lines.append(f"{o.stage:<{width}}  {shown:<7}  {o.seconds:6.1f}s  {note}".rstrip())
        if o.status == "failed" and o.tests and not o.failing:
            # pytest failed after its tests passed: a session-level check (leftovers, a
            # plugin's own verdict) or its exit; its output's last lines say which.
            lines.append(
                f"{'':<{width}}  ✗ no test failed ({_counted(o.tests)}): the "
                "session itself failed, its output's last lines say why"
            )
        shown_tests = o.failing[:FAILING_SHOWN]
        lines += [f"{'':<{width}}  ✗ {test}" for test in shown_tests]
        if len(o.failing) > len(shown_tests):
            more = len(o.failing) - len(shown_tests)
            lines.append(f"{'':<{width}}  ✗ and {more} more (out/report.html has them all)")
        lines += [f"{'':<{width}}  ~ flaky: {test}" for test in o.flaky[:FAILING_SHOWN]]
        if len(o.flaky) > FAILING_SHOWN:
            more = len(o.flaky) - FAILING_SHOWN
            lines.append(f"{'':<{width}}  ~ and {more} more flaky (out/report.html has them all)")
    flaky = sum(len(o.flaky) for o in outcomes)
    # "incomplete" only when a stage is: the usual line stays as CI logs have read it
    incomplete = f"{counts['incomplete']} incomplete, " if counts["incomplete"] else ""
    lines.append(
        f"gate — {counts['passed']} passed, {counts['failed']} failed, {incomplete}"
        f"{counts['skipped']} skipped (stages)"
        + (f"; {flaky} flaky tests (failed, then passed a rerun)" if flaky else "")
    )
    return "\n".join(lines)


def _counted(tests: dict[str, int]) -> str:
    return ", ".join(f"{n} {outcome}" for outcome, n in tests.items() if n and outcome != "tests")
