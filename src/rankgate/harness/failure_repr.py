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


def failure_repr(item: pytest.Item, text: str) -> ReprExceptionInfo:
    """``text`` as a test's failure report; its first line is the summary."""
    path, lineno, _ = item.location
    headline = text.split("\n", 1)[0]
    body = text if text.endswith("\n") else text + "\n"
    return ReprExceptionInfo(
        reprtraceback=ReprTraceback([ReprEntryNative([body])], None, "native"),
        reprcrash=ReprFileLocation(path, (lineno or 0) + 1, headline),
    )
