"""pytest plugin: an OpenTelemetry span for the session, each test and each rank.

Registered as ``rankgate-tracing`` by rankgate's one pytest11 entry point
(:mod:`rankgate.pytest_plugin`, so ``-p no:rankgate`` turns it off too); it registers
:mod:`rankgate.report.outcome_plugin` (always on); the spans do nothing
unless tracing is on (:mod:`rankgate.report.tracing`). It uses public hooks only:

- the session span starts in ``pytest_sessionstart``, as a child of ``TRACEPARENT``
  (the executor's stage span, or Dagger's);
- a test span runs from ``pytest_runtest_logstart`` to ``pytest_runtest_logfinish``,
  with the test's outcome from its reports;
- each rank of a multi-rank test becomes a child span of its test span, from the rank
  outcomes the harness puts in the call report's ``user_properties``
  (``rankgate.rank<r>.outcome``), timed as the call phase.

PYTEST_DONT_REWRITE: imported before pytest starts in a forked process (see :mod:`rankgate`).
"""

from __future__ import annotations

import re
import time

import pytest

from rankgate.report import tracing
from rankgate.report.outcome_plugin import OutcomeRecorder

_RANK_OUTCOME = re.compile(r"^rankgate\.rank(\d+)\.outcome$")
_SEVERITY = {"passed": 0, "skipped": 1, "failed": 2}


class TracingPlugin:
    """Holds the open spans of one pytest process."""

    def __init__(self) -> None:
        self.session_span = None
        self.session_context = None
        self.tests: dict[str, dict] = {}

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        from opentelemetry import trace

        name = "pytest " + " ".join(session.config.invocation_params.args)
        self.session_span = tracing.tracer().start_span(
            name[:200], context=tracing.parent_context(),
            attributes={"rankgate.kind": "session"},
        )  # fmt: skip
        self.session_context = trace.set_span_in_context(self.session_span)

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        span = tracing.tracer().start_span(
            nodeid, context=self.session_context,
            attributes={"rankgate.kind": "test", "code.filepath": location[0]},
        )  # fmt: skip
        self.tests[nodeid] = {"span": span, "outcome": "passed"}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test = self.tests.get(report.nodeid)
        if test is None:
            return
        outcome = "error" if report.failed and report.when != "call" else report.outcome
        if _SEVERITY.get(outcome, 3) > _SEVERITY.get(test["outcome"], 3):
            test["outcome"] = outcome
        if report.when == "call":
            self._rank_spans(test["span"], report)

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        test = self.tests.pop(nodeid, None)
        if test is None:
            return
        span = test["span"]
        span.set_attribute("rankgate.outcome", test["outcome"])
        tracing.set_status(span, test["outcome"])
        span.end()

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.session_span is not None:
            self.session_span.set_attribute("pytest.exitstatus", int(exitstatus))
            tracing.set_status(self.session_span, "passed" if exitstatus in (0, 5) else "failed")
            self.session_span.end()
        tracing.shutdown()

    def _rank_spans(self, parent, report: pytest.TestReport) -> None:
        from opentelemetry import trace

        props = dict(report.user_properties)
        ranks = sorted(
            (int(m.group(1)), str(value))
            for key, value in props.items()
            if (m := _RANK_OUTCOME.match(str(key)))
        )
        if not ranks:
            return
        failing = str(props.get("rankgate.failing_ranks", ""))
        parent.set_attribute("rankgate.world", int(props.get("rankgate.world", len(ranks))))
        parent.set_attribute("rankgate.backend", str(props.get("rankgate.backend", "")))
        if failing:
            parent.set_attribute("rankgate.failing_ranks", failing)
        stop = getattr(report, "stop", 0.0) or time.time()
        start = getattr(report, "start", 0.0) or stop - report.duration
        context = trace.set_span_in_context(parent)
        for rank, outcome in ranks:
            span = tracing.tracer().start_span(
                f"rank {rank}", context=context, start_time=int(start * 1e9),
                attributes={"rankgate.kind": "rank", "rankgate.rank": rank,
                            "rankgate.outcome": outcome},
            )  # fmt: skip
            tracing.set_status(span, outcome)
            span.end(end_time=int(stop * 1e9))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(OutcomeRecorder(), "rankgate-outcomes")
    if tracing.enabled():
        config.pluginmanager.register(TracingPlugin(), "rankgate-tracing-spans")
