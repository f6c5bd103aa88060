"""Pool mode's record of an interrupted run: Ctrl-C (SIGINT), or SIGTERM/SIGHUP, which
the pool's session turns into ``pytest.exit``.

pytest stops at once on either and writes its JUnit file with the tests that ended, and
for the test that was running a nameless ``<testcase/>`` (its set-up's duration, no
result): read as it is, an interrupted run looks passed. This plugin records, in the
JUnit file, the running test as failed naming the signal, every test after it as
``not run`` (with the same reason), and the run as interrupted (the testsuite property
``rankgate.interrupted``), so merge-junit and the report say INCOMPLETE. The terminal
counts the same reports: its last line says "1 failed, 1 passed, 1 not run", never
pytest's green "1 passed" of the tests that ended. In-place mode
records its own (``inplace.stop``: every rank, from its signal watch).

Under pytest-xdist this process is the controller: it runs no test and collects none, so
it learns the tests from its workers (the ids they collected, each test's start and end)
and records every test a worker was running, and every test no worker started.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from _pytest.junitxml import mangle_test_address, xml_key
from _pytest.outcomes import Exit

from rankgate.harness.failure_repr import failure_repr, item_report, not_run_report
from rankgate.harness.verdict_lines import (
    INTERRUPTED_PREFIX,
    INTERRUPTED_PROPERTY,
    INTERRUPTED_TEST_PROPERTY,
    NOT_RUN_PREFIX,
)

INTERRUPT_PLUGIN = "rankgate-interrupt"


def why_interrupted(exc: BaseException) -> str:
    """'SIGINT (Ctrl-C)' for a KeyboardInterrupt; pytest.exit's own message otherwise
    (the pool's session says 'rankgate: received SIGTERM')."""
    if isinstance(exc, Exit):
        return str(exc.msg).removeprefix("rankgate: ") or "pytest.exit"
    return "received SIGINT (Ctrl-C)"


@dataclass(frozen=True)
class _WorkerTest:
    """A test as the xdist controller knows it (it holds no items): what reports need."""

    nodeid: str
    location: tuple
    keywords: tuple = ()

    @classmethod
    def from_id(cls, nodeid: str) -> _WorkerTest:
        path, _, name = nodeid.partition("::")
        return cls(nodeid, (path, None, name))


class InterruptRecord:
    """Writes an interrupted run's truth into pytest's JUnit file (see the module doc)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._items: list[pytest.Item] = []
        self._next = 0  # index of the first test not yet started
        self.reason: str | None = None
        self._started = 0.0  # time.monotonic() when the running test began
        # Under xdist, on the controller: the tests the workers collected, and those that
        # started and did not end: location, start time, and the worker that runs it.
        self._worker_ids: list[str] = []
        self._worker_running: dict[str, tuple[tuple, float, object]] = {}
        self._worker_started: set[str] = set()
        # Tests whose attempt reported "rerun" (pytest-rerunfailures): another attempt
        # follows, so its teardown and logfinish do not end it.
        self._rerunning: set[str] = set()
        self._ended: str | None = None  # in this process: the test whose last report is in

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._items = list(session.items)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        index = self._index_of(item)
        self._next = index + 1
        self._started = time.monotonic()
        self._ended = None
        try:
            return (yield)
        except (KeyboardInterrupt, Exit) as exc:
            if self._ended != item.nodeid:  # stopped after its teardown's report: it ended
                self._record_running(item, exc)
            raise

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        if not self._worker_ids:
            self._worker_ids = list(ids)  # every worker collects the same tests

    def pytest_runtest_logstart(self, nodeid: str, location: tuple) -> None:
        self._rerunning.discard(nodeid)  # its next attempt begins
        if self._worker_ids:
            self._worker_running[nodeid] = (location, time.monotonic(), None)
            self._worker_started.add(nodeid)

    @pytest.hookimpl(trylast=True)  # after pytest's JUnit writer has taken the report
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._running_on(report.nodeid, getattr(report, "node", None))
        if report.outcome == "rerun":
            self._rerunning.add(report.nodeid)
        elif report.when == "teardown":
            self._end(report.nodeid)

    def _running_on(self, nodeid: str, worker) -> None:
        """The worker a running test runs on, once known: pytest's JUnit keys a test by
        (id, worker), and the record joins the worker's own."""
        running = self._worker_running.get(nodeid)
        if running is not None and running[2] is None:
            self._worker_running[nodeid] = (*running[:2], worker)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self._end(nodeid)

    def _end(self, nodeid: str) -> None:
        """Its last report is in the JUnit file: a stop from now on did not stop it. Its
        teardown's report is that, before pytest's logfinish and the hooks around it."""
        if nodeid not in self._rerunning:
            self._worker_running.pop(nodeid, None)
            self._ended = nodeid

    def _take_in_queued_worker_events(self) -> None:
        """Under xdist, the starts of tests the controller had not read yet when the signal
        came: xdist queues each worker's events for the controller's loop, so a test a
        worker began a moment before (or while the loop was busy) is running, not "between
        tests". A queued end is not taken in: its reports never reached the JUnit file."""
        queue = getattr(self.config.pluginmanager.get_plugin("dsession"), "queue", None)
        if queue is None or not self._worker_ids:
            return
        with queue.mutex:
            pending = list(queue.queue)
        for name, kwargs in pending:  # xdist's ("logstart", {node, nodeid, location}), ...
            if name == "logstart":
                self.pytest_runtest_logstart(kwargs["nodeid"], kwargs["location"])
                self._running_on(kwargs["nodeid"], kwargs["node"])

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
        self._log(xml, report)

    def _log(self, xml, report: pytest.TestReport) -> None:
        """A report this plugin makes, in the JUnit file and on the terminal, whose last
        line then counts it as the JUnit file does. Only those two: the run's other
        plugins (stored durations, say) never saw a test that did not end."""
        if xml is not None:
            xml.pytest_runtest_logreport(report=report)
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.pytest_runtest_logreport(report=report)

    def pytest_report_teststatus(self, report: pytest.TestReport):
        """A test an interrupt kept from starting: "not run" on the terminal, as merge-junit
        and the report count it (pytest's word would be an error at set-up)."""
        if report.when == "setup" and str(report.longrepr).startswith(NOT_RUN_PREFIX):
            return "not run", "n", ("NOT RUN", {"red": True})
        return None

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo) -> None:
        if self.reason is not None or excinfo.errisinstance(pytest.Session.Interrupted):
            return  # pytest's own stop (errors during collection), which it says itself
        why = why_interrupted(excinfo.value)
        self._take_in_queued_worker_events()
        if self._worker_running:  # the xdist controller: what its workers were running
            self.reason = f"{why} while {', '.join(self._worker_running)} ran"
        else:  # between tests, or in collection
            self.reason = f"{why} between tests"

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Before pytest's JUnit writer: the run's reason, and the tests never started."""
        if self.reason is None:
            return
        xml = _xml(self.config)
        if self._items:
            rest = self._items[self._next :]
        else:  # the xdist controller
            for nodeid, (location, started, worker) in self._worker_running.items():
                self._record_worker_test(xml, nodeid, location, started, worker)
            rest = [
                _WorkerTest.from_id(i) for i in self._worker_ids if i not in self._worker_started
            ]
        if xml is not None:
            xml.add_global_property(INTERRUPTED_PROPERTY, self.reason)
        for item in rest:
            self._log(xml, not_run_report(item, f"{INTERRUPTED_PREFIX}{self.reason}"))
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.ensure_newline()
            tr.write_line(
                f"rankgate: interrupted: {self.reason}; {len(rest)} later test(s) not run",
                red=True,
            )

    def _record_worker_test(self, xml, nodeid: str, location, started: float, worker) -> None:
        """A test a worker was running when the controller was stopped: failed."""
        test = _WorkerTest(nodeid, tuple(location))
        extra = {"node": worker} if worker is not None else {}
        report = item_report(
            test,
            outcome="failed",
            longrepr=failure_repr(test, f"{INTERRUPTED_PREFIX}{self.reason}; the test did not end"),
            when="call",
            duration=time.monotonic() - started,
            **extra,
        )
        if xml is not None:
            report.duration -= xml.node_reporter(report).duration  # its set-up's, counted
            names = mangle_test_address(nodeid)
            xml.add_global_property(
                INTERRUPTED_TEST_PROPERTY, "::".join([".".join(names[:-1]), names[-1]])
            )
        self._log(xml, report)


def _xml(config: pytest.Config):
    return config.stash.get(xml_key, None)
