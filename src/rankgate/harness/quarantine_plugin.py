"""The pytest side of the quarantine list (:mod:`rankgate.harness.quarantine`): marks the
listed tests, words their outcome, keeps the history of their passes in a row."""

from __future__ import annotations

import json

import pytest
from _pytest.junitxml import xml_key

from rankgate.harness.attempts import is_flaky
from rankgate.harness.pluginnames import INPLACE_PLUGIN
from rankgate.harness.quarantine import (
    FAILURE_CHARS,
    FAILURE_PROPERTY,
    QUARANTINE_PROPERTY,
    STALE_PROPERTY,
    XFAIL_PREFIX,
    QuarantineError,
    QuarantineList,
    next_streak,
    property_value,
    read_history,
    stale_entries,
    stale_line,
    streak_text,
    write_history,
)
from rankgate.harness.rerun_report import attempts_of

QUARANTINE_PLUGIN = "rankgate-quarantine"


def quarantined(report: pytest.TestReport) -> bool:
    return any(name == QUARANTINE_PROPERTY for name, _ in getattr(report, "user_properties", ()))


def outcome_of(report: pytest.TestReport) -> str | None:
    """passed or failed for a quarantined test's call (its xfail marker turned a failure
    into an expected one, a pass into an unexpected one); skipped; None for other phases."""
    if report.when != "call":
        return "failed" if report.failed else ("skipped" if report.skipped else None)
    if hasattr(report, "wasxfail"):
        said = "failed" if report.skipped else "passed"
    else:
        said = report.outcome
    # a pass only on a rerun is no clean pass: it does not count towards leaving the list
    return "flaky" if said == "passed" and is_flaky(attempts_of(report)) else said


class Quarantine:
    """Quarantined tests of one run."""

    def __init__(self, config: pytest.Config, listed: QuarantineList) -> None:
        self.config = config
        self.listed = listed
        try:
            self.before = read_history(listed.history_path)
        except QuarantineError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.outcomes: dict[str, str] = {}
        """node id -> passed, failed or skipped, in the order they ended."""
        self.stale: list[dict] = []
        """Entries that match no test, found once by the process that reports."""

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not self._reports():  # once per run: the pool's controller, rank 0 in place
            return
        self.stale = stale_entries(self.listed, self.config.rootpath)
        # In the run's JUnit file too, so that the report lists them (report.html,
        # summary.md), not only this terminal.
        xml = self.config.stash.get(xml_key, None)
        if xml is not None:
            for found in self.stale:
                xml.add_global_property(STALE_PROPERTY, json.dumps(found))

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            entry = self.listed.entry_for(item.nodeid)
            if entry is None:
                continue
            reason = f"{XFAIL_PREFIX}{entry.reason} ({entry.issue})"
            item.add_marker(pytest.mark.xfail(reason=reason, strict=False))
            streak = self.before.get(item.nodeid, 0)
            value = property_value(entry, streak, self.listed.passes_to_leave)
            item.user_properties.append((QUARANTINE_PROPERTY, value))

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outside the xfail marker's own wrapper
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        report = yield
        if quarantined(report) and outcome_of(report) == "failed" and report.longrepr:
            # The expected failure's JUnit element has no text: keep it as a property
            # (the teardown report, which JUnit reads, copies the item's).
            text = str(report.longrepr)
            if len(text) > FAILURE_CHARS:
                text = "…" + text[-(FAILURE_CHARS - 1) :]
            item.user_properties.append((FAILURE_PROPERTY, text))
        return report

    def pytest_report_teststatus(self, report: pytest.TestReport):
        if report.when == "call" and quarantined(report):
            said = outcome_of(report)
            if said in ("passed", "failed", "flaky"):
                return "quarantined", "q", (f"QUARANTINED ({said})", {"yellow": True})
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not quarantined(report):
            return
        said = outcome_of(report)
        if said is None:
            return
        # The worst phase stands: a teardown error after a pass is no pass.
        if report.when == "call" or said == "failed" or report.nodeid not in self.outcomes:
            self.outcomes[report.nodeid] = said

    def streaks(self) -> dict[str, int]:
        """Each listed test's passes in a row after this run (only those still listed)."""
        after = {k: v for k, v in self.before.items() if self.listed.entry_for(k)}
        for nodeid, said in self.outcomes.items():
            after[nodeid] = next_streak(self.before.get(nodeid, 0), said)
        return after

    def pytest_terminal_summary(self, terminalreporter) -> None:
        for found in self.stale:  # a stale entry should not stay on the list unseen
            line = stale_line(found)
            terminalreporter.write_line(f"rankgate: WARNING: {line}", yellow=True, bold=True)
        if not self.outcomes:
            return
        tr, needed = terminalreporter, self.listed.passes_to_leave
        streaks = self.streaks()
        tr.section(f"rankgate: quarantined tests ({self.listed.path})", sep="=", yellow=True)
        for nodeid, said in self.outcomes.items():
            entry = self.listed.entry_for(nodeid)
            ready = streaks[nodeid] >= needed
            word = "READY TO LEAVE" if ready else "QUARANTINED"
            tr.write_line(
                f"{word} {nodeid}: {said}; passes in a row {streak_text(streaks[nodeid], needed)}"
                f" — {entry.reason} ({entry.issue})"
            )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.outcomes or not self._reports():
            return
        try:
            write_history(self.listed.history_path, self.streaks())
        except OSError as exc:  # the run's verdict stands: say why the count is not kept
            tr = self.config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                tr.write_line(f"rankgate: quarantine history not written: {exc}", yellow=True)

    def _reports(self) -> bool:
        """The process that keeps the history: not an xdist worker; rank 0 in place."""
        if hasattr(self.config, "workerinput"):
            return False
        inplace = self.config.pluginmanager.get_plugin(INPLACE_PLUGIN)
        return inplace is None or inplace.launch.rank == 0
