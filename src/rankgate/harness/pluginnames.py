"""Names the plugin registers its parts under, and the fixtures that live per process:
read by the plugin and by the adoption hooks, so neither imports the other."""

from __future__ import annotations

INPLACE_PLUGIN = "rankgate-inplace"
POOL_PLUGIN = "rankgate-pools"
HARNESS_PLUGIN = "rankgate-harness"
"""rankgate.harness.plugin, registered by the pytest entry point (rankgate.pytest_plugin)."""
COVERAGE_ENV = "RANKGATE_COVERAGE"
"""The controller's pytest-cov settings, as JSON, in a pool rank's environment
(rankgate.harness.coverage_ranks sets it, pool.rankcoverage reads it)."""
TRACING_PLUGIN = "rankgate-tracing"
"""rankgate.report.tracing_plugin, registered by the same entry point."""

_CAPTURED = (
    "print() in the test body: every rank's stdout and stderr are captured and shown per rank"
)
PER_PROCESS_FIXTURES = {
    "capsys": _CAPTURED,
    "capsysbinary": _CAPTURED,
    "capfd": _CAPTURED,
    "capfdbinary": _CAPTURED,
    "caplog": "logging in the test body: each rank's log lines are in its captured stderr",
    "recwarn": "warnings.catch_warnings(record=True) or pytest.warns() in the test body",
    "monkeypatch": "unittest.mock.patch or os.environ in the test body (each rank restores "
    "environment variables after the test)",
    "request": "a fixture of your own that reads what the test needs from request and "
    "returns it as a plain value",
    "pytestconfig": "a fixture of your own that returns the option values the test needs",
    "record_property": "a fixture of your own (fixtures run in the pytest process)",
    "record_xml_attribute": "a fixture of your own (fixtures run in the pytest process)",
    "record_testsuite_property": "a fixture of your own (fixtures run in the pytest process)",
}
