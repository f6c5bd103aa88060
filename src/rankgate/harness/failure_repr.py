"""The failure report of a world test, shaped the way pytest expects.

A plain string as ``report.longrepr`` becomes the whole "short test summary"
line on CI machines (pytest stops trimming it there), so a multi-rank report
with every rank's stack would be printed twice. This object prints the full
text in the FAILURES section but offers only its headline as the crash
message, which the summary line, JUnit's ``message`` attribute and xdist's
report serialisation all use.
"""

from __future__ import annotations

import pytest
from _pytest._code.code import ReprEntryNative, ReprExceptionInfo, ReprFileLocation, ReprTraceback

from rankgate.harness.verdict_lines import NOT_RUN_PREFIX


def failure_repr(item: pytest.Item, text: str) -> ReprExceptionInfo:
    """``text`` as a test's failure report; its first line is the summary."""
    path, lineno, _ = item.location
    headline = text.split("\n", 1)[0]
    body = text if text.endswith("\n") else text + "\n"
    return ReprExceptionInfo(
        reprtraceback=ReprTraceback([ReprEntryNative([body])], None, "native"),
        reprcrash=ReprFileLocation(path, (lineno or 0) + 1, headline),
    )


def item_report(item: pytest.Item, *, outcome: str, longrepr, when: str, **fields):
    """A report of ``item`` that pytest did not make itself (a test a stop or a signal
    ended, one never started), shaped as pytest's own for its JUnit and terminal."""
    return pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords=dict.fromkeys(item.keywords, 1),
        outcome=outcome,
        longrepr=longrepr,
        when=when,
        **fields,
    )


def not_run_report(item: pytest.Item, reason: str) -> pytest.TestReport:
    """A test the run never started: merge-junit's "not run", saying why."""
    return item_report(item, outcome="failed", longrepr=f"{NOT_RUN_PREFIX}{reason}", when="setup")
