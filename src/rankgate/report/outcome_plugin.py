"""pytest plugin: mark an unexpectedly passing test in its JUnit case.

pytest's JUnit writer records an xfail-marked test that passed (non-strict) as an
ordinary pass, so a report read from JUnit cannot tell it apart. This plugin adds a
``rankgate.outcome=xpassed`` property to such a test; :mod:`rankgate.report.results`
reads it. Loaded by the ``rankgate-tracing`` plugin's module, always on while rankgate is.

PYTEST_DONT_REWRITE: imported before pytest starts in a forked process (see :mod:`rankgate`).
"""

from __future__ import annotations

import pytest

OUTCOME_PROPERTY = "rankgate.outcome"


class OutcomeRecorder:
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        # JUnit reads properties from the teardown report, which copies item.user_properties.
        if report.when == "call" and report.passed and hasattr(report, "wasxfail"):
            item.user_properties.append((OUTCOME_PROPERTY, "xpassed"))
        return report
