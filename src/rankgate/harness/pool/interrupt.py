"""Pool mode's record of an interrupted run: Ctrl-C (SIGINT), or SIGTERM/SIGHUP, which
the pool's session turns into ``pytest.exit``.

pytest stops at once on either and writes its JUnit file with the tests that ended, and
for the test that was running a nameless ``<testcase/>`` (its set-up's duration, no
result): read as it is, an interrupted run looks passed. This plugin records, in the
JUnit file, the running test as failed naming the signal, every test after it as
``not run`` (with the same reason), and the run as interrupted (the testsuite property
``rankgate.interrupted``), so merge-junit and the report say INCOMPLETE. In-place mode
records its own (``inplace.stop``: every rank, from its signal watch).
"""

from __future__ import annotations

import time

import pytest
from _pytest.junitxml import mangle_test_address, xml_key
from _pytest.outcomes import Exit

from rankgate.harness.failure_repr import failure_repr, item_report, not_run_report
from rankgate.harness.verdict_lines import (
    INTERRUPTED_PREFIX,
    INTERRUPTED_PROPERTY,
    INTERRUPTED_TEST_PROPERTY,
)

INTERRUPT_PLUGIN = "rankgate-interrupt"


def why_interrupted(exc: BaseException) -> str:
    """'SIGINT (Ctrl-C)' for a KeyboardInterrupt; pytest.exit's own message otherwise
    (the pool's session says 'rankgate: received SIGTERM')."""
    if isinstance(exc, Exit):
        return str(exc.msg).removeprefix("rankgate: ") or "pytest.exit"
    return "received SIGINT (Ctrl-C)"


class InterruptRecord:
    """Writes an interrupted run's truth into pytest's JUnit file (see the module doc)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._items: list[pytest.Item] = []
        self._next = 0  # index of the first test not yet started
        self.reason: str | None = None
        self._started = 0.0  # time.monotonic() when the running test began

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._items = list(session.items)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        index = self._index_of(item)
        self._next = index + 1
        self._started = time.monotonic()
        try:
            return (yield)
        except (KeyboardInterrupt, Exit) as exc:
            self._record_running(item, exc)
            raise

    def _index_of(self, item: pytest.Item) -> int:
        if self._next < len(self._items) and self._items[self._next] is item:
            return self._next
        try:
            return self._items.index(item)
        except ValueError:
            return self._next

    def _record_running(self, item: pytest.Item, exc: BaseException) -> None:
        """The test the signal stopped: failed, naming the signal."""
        self.reason = f"{why_interrupted(exc)} while {item.nodeid} ran"
        xml = _xml(self.config)
        report = item_report(
            item,
            outcome="failed",
            longrepr=failure_repr(item, f"{INTERRUPTED_PREFIX}{self.reason}; the test did not end"),
            when="call",
            duration=time.monotonic() - self._started,
        )
        if xml is not None:
            # pytest's JUnit sums the phases' durations: its set-up's is counted already.
            report.duration -= xml.node_reporter(report).duration
            names = mangle_test_address(item.nodeid)
            xml.add_global_property(
                INTERRUPTED_TEST_PROPERTY, "::".join([".".join(names[:-1]), names[-1]])
            )
            xml.pytest_runtest_logreport(report=report)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo) -> None:
        if self.reason is None:  # between tests, or in collection
            self.reason = f"{why_interrupted(excinfo.value)} between tests"

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Before pytest's JUnit writer: the run's reason, and the tests never started."""
        if self.reason is None:
            return
        rest = self._items[self._next :]
        xml = _xml(self.config)
        if xml is not None:
            xml.add_global_property(INTERRUPTED_PROPERTY, self.reason)
            for item in rest:
                xml.pytest_runtest_logreport(
                    report=not_run_report(item, f"{INTERRUPTED_PREFIX}{self.reason}")
                )
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.ensure_newline()
            tr.write_line(
                f"rankgate: interrupted: {self.reason}; {len(rest)} later test(s) not run",
                red=True,
            )


def _xml(config: pytest.Config):
    return config.stash.get(xml_key, None)
