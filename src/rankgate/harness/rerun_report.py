"""The terminal's word for tests run more than once (``--rankgate-reruns``), in either mode.

A flaky test (failed, then passed a rerun) shows as FLAKY and is counted apart in the
last line ("1 flaky"); its exit status is a pass unless ``--rankgate-flaky=fail`` made
it a failure. At the end, a section lists every test run more than once, with every
attempt. Both modes put :data:`~rankgate.harness.attempts.ATTEMPTS_PROPERTY` on the
call report; this plugin reads nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rankgate.harness.attempts import (
    ATTEMPTS_PROPERTY,
    FLAKY_PROPERTY,
    Attempt,
    decode,
    is_flaky,
)

RERUN_PLUGIN = "rankgate-reruns"


def attempts_of(report: pytest.TestReport) -> list[Attempt]:
    """The attempts a report carries ([] for a test run once)."""
    for name, value in getattr(report, "user_properties", ()):
        if name == ATTEMPTS_PROPERTY:
            return decode(str(value))
    return []


def flaky_pass(report: pytest.TestReport) -> bool:
    """A call report that passed after a failed attempt, under ``--rankgate-flaky=pass``."""
    return (
        report.when == "call"
        and report.passed
        and (FLAKY_PROPERTY, "pass") in getattr(report, "user_properties", ())
    )


def rerun_word(report: pytest.TestReport, attempts: list[Attempt]) -> str:
    """A rerun test's word in the section: FLAKY, or its final outcome."""
    if flaky_pass(report):
        return "FLAKY"
    if is_flaky(attempts):
        return "FLAKY (failed: --rankgate-flaky=fail)"
    return "FAILED" if report.failed else report.outcome.upper()


class RerunReport:
    """Counts flaky tests apart and lists every test that was rerun."""

    def __init__(self) -> None:
        self.rerun: dict[str, tuple[str, list[Attempt]]] = {}
        """node id -> (its final word, its attempts), in the order they ended."""

    def pytest_report_teststatus(self, report: pytest.TestReport):
        if flaky_pass(report):
            return "flaky", "~", ("FLAKY", {"yellow": True})
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        attempts = attempts_of(report) if report.when == "call" else []
        if not attempts:
            return
        self.rerun[report.nodeid] = (rerun_word(report, attempts), attempts)

    def add_others(
        self, others: dict[str, tuple[str, list[Attempt]]], place: Callable[[str], int]
    ) -> None:
        """In place, the rerun tests other ranks ran (``others``: node id -> word,
        attempts), listed with this rank's in the run's order (``place``), so rank 0
        names every test the run ran more than once, as merge-junit does."""
        self.rerun.update(others)
        self.rerun = dict(sorted(self.rerun.items(), key=lambda entry: place(entry[0])))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.rerun:
            return
        tr = terminalreporter
        tr.section("rankgate: tests run more than once (--rankgate-reruns)", sep="=", yellow=True)
        for nodeid, (word, attempts) in self.rerun.items():
            tr.write_line(f"{word} {nodeid}")
            for attempt in attempts:
                tr.write_line(f"    {attempt.line()}")
