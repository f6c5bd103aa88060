"""Writing a merged run as one JUnit file (``rankgate merge-junit --output``).

Each merged test becomes one ``<testcase>``, its outcome written the way pytest writes
it (so a merged file reads back with the same outcomes, :mod:`rankgate.report.junitfile`),
its ranks' outcomes and properties as properties, and its ranks' output prefixed
``[rank r]`` (:mod:`rankgate.report.mergedcase` splits them back).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path

from rankgate.harness.attempts import ATTEMPTS_PROPERTY, FLAKY_PROPERTY, encode
from rankgate.harness.quarantine import STALE_PROPERTY
from rankgate.harness.rankfiles import RUN_ID_PROPERTY
from rankgate.harness.verdict_lines import (
    BACKEND_PROPERTY,
    INTERRUPTED_PROPERTY,
    INTERRUPTED_TEST_PROPERTY,
    NOT_RUN_PREFIX,
    OUTCOME_PROPERTY,
    RANKS_PROPERTY,
    WORLD_PROPERTY,
)
from rankgate.report.junitfile import XPASS_MESSAGE
from rankgate.report.mergedtest import MergedTest

RERUN_PROPERTIES = (ATTEMPTS_PROPERTY, FLAKY_PROPERTY, RANKS_PROPERTY, OUTCOME_PROPERTY)
"""Written once per merged case, not once per rank (a rank's own outcome is in
``rank_outcomes``)."""


def write_xml(report, path: str | Path) -> None:
    """Write one JUnit file holding ``report``'s merged verdicts (a
    :class:`rankgate.report.junit.MergedReport`, which calls this)."""
    c = report.counts
    totals = {
        "tests": str(c["tests"]),
        "failures": str(c["failed"]),
        "errors": str(c["error"] + c["not run"]),
        "skipped": str(c["skipped"] + c["xfailed"] + c["xpassed"]),
        "time": f"{sum(test_time(t) for t in report.tests):.3f}",
    }
    root = ET.Element("testsuites", {"name": "rankgate merge-junit", **totals})
    suite = ET.SubElement(root, "testsuite", {"name": report.suite_name, **totals})
    _add_properties(
        suite,
        [("ranks", _csv(report.ranks)), ("world_size", str(report.world_size))]
        + [("source", s) for s in report.sources]
        + [(INTERRUPTED_PROPERTY, why) for why in report.incomplete]
        + [(INTERRUPTED_TEST_PROPERTY, test) for test in report.interrupted_tests]
        + ([(RUN_ID_PROPERTY, report.run_id)] if report.run_id else [])
        + [(STALE_PROPERTY, found) for found in report.stale_quarantine]
        + list(report.labels),
    )
    for test in report.tests:
        _write_case(suite, test)
    _add_text(suite, "system-out", report.system_out)
    _add_text(suite, "system-err", report.system_err)
    ET.indent(root)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _write_case(suite: ET.Element, test: MergedTest) -> None:
    attrs = {"classname": test.classname, "name": test.name, "time": f"{test_time(test):.3f}"}
    case = ET.SubElement(suite, "testcase", attrs)
    props = [("ranks", _csv(test.results)), ("rank_outcomes", _outcomes_csv(test))]
    if test.failing_ranks:
        props.append(("failing_ranks", _csv(test.failing_ranks)))
    if test.attempts:
        props.append((ATTEMPTS_PROPERTY, encode(test.attempts)))
    if test.flaky:
        props.append((FLAKY_PROPERTY, test.flaky))
    props += [
        (f"rank{r}.{k}", v)
        for r, res in test.results.items()
        for k, v in res.properties
        if k not in RERUN_PROPERTIES
    ]
    props += list(test.labels)
    for name in (WORLD_PROPERTY, BACKEND_PROPERTY):  # the pool's names, where the ranks agree
        said = {dict(res.properties).get(name) for res in test.results.values()} - {None}
        if len(said) == 1:
            props.append((name, said.pop()))
    _add_properties(case, props)
    # The way pytest writes each outcome, so that merged files read back the same.
    tag, attrs = {
        "failed": ("failure", {"message": test.message}),
        "error": ("error", {"message": test.message}),
        "not run": ("error", {"message": NOT_RUN_PREFIX + test.message}),
        "skipped": ("skipped", {"message": test.message}),
        "xfailed": ("skipped", {"type": "pytest.xfail", "message": test.message}),
        "xpassed": ("skipped", {"message": XPASS_MESSAGE}),
    }.get(test.verdict, (None, {}))
    if tag:
        result = ET.SubElement(case, tag, attrs)
        result.text = test.details or None
    _add_text(case, "system-out", prefixed((r, res.system_out) for r, res in test.results.items()))
    _add_text(case, "system-err", prefixed((r, res.system_err) for r, res in test.results.items()))


def _add_properties(element: ET.Element, props: list[tuple[str, str]]) -> None:
    if props:
        holder = ET.SubElement(element, "properties")
        for name, value in props:
            ET.SubElement(holder, "property", {"name": name, "value": value})


def _add_text(element: ET.Element, tag: str, text: str) -> None:
    if text:
        ET.SubElement(element, tag).text = text


def test_time(test: MergedTest) -> float:
    # Ranks run side by side: the test took as long as its slowest rank.
    return max((res.time for res in test.results.values()), default=0.0)


def prefixed(texts: Iterable[tuple[int | None, str]]) -> str:
    lines = []
    for rank, text in texts:
        prefix = "" if rank is None else f"[rank {rank}] "
        lines.extend(prefix + line for line in text.rstrip("\n").splitlines())
    return "\n".join(lines) + "\n" if lines else ""


def _outcomes_csv(test: MergedTest) -> str:
    return ",".join(f"{r}={o}" for r, o in test.rank_outcomes.items())


def _csv(ranks: Iterable[int]) -> str:
    return ",".join(str(r) for r in ranks)
