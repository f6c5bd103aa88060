"""Reruns and quarantine in merge-junit, the summary, the pages and the gate's table, from
crafted per-rank files (the suites run the real thing)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from rankgate.harness.attempts import ATTEMPTS_PROPERTY, FLAKY_PROPERTY, Attempt, encode
from rankgate.harness.quarantine import FAILURE_PROPERTY, QUARANTINE_PROPERTY
from rankgate.harness.verdict_lines import OUTCOME_PROPERTY
from rankgate.pipeline.stage_outcome import Outcome
from rankgate.pipeline.table import summary_table
from rankgate.report import present
from rankgate.report.collect import ReportData
from rankgate.report.html import render_html
from rankgate.report.json_summary import stage_flaky, summarize
from rankgate.report.junit import merge_junit, read_junit
from rankgate.report.markdown import render_markdown

pytestmark = pytest.mark.unit

ATTEMPTS = [
    Attempt(number=1, verdict="failed", summary="rank 1 failed; rank 0 passed",
            ranks={0: "passed", 1: "failed"}, errors={1: "AssertionError: first"}),
    Attempt(number=2, verdict="passed", ranks={0: "passed", 1: "passed"}),
]  # fmt: skip


def _props(pairs) -> str:
    return "".join(f'<property name="{k}" value="{html.escape(v, quote=True)}"/>' for k, v in pairs)


def _rank_file(folder: Path, rank: int, cases: str) -> Path:
    path = folder / f"junit.rank{rank}.xml"
    path.write_text(
        '<testsuites><testsuite name="pytest"><properties>'
        f'<property name="rank" value="{rank}"/><property name="world_size" value="2"/>'
        f"</properties>{cases}</testsuite></testsuites>"
    )
    return path


def _flaky_case(policy: str = "pass") -> str:
    props = _props([(ATTEMPTS_PROPERTY, encode(ATTEMPTS)), (FLAKY_PROPERTY, policy)])
    failure = '<failure message="flaky">text</failure>' if policy == "fail" else ""
    return (
        f'<testcase classname="t" name="test_flaky" time="0.1"><properties>{props}'
        f"</properties>{failure}</testcase>"
    )


def _quarantined_case(failed: bool) -> str:
    value = json.dumps({"reason": "slow", "issue": "https://x/1", "streak": 4, "needed": 5})
    pairs = [(QUARANTINE_PROPERTY, value)]
    if failed:
        pairs.append((FAILURE_PROPERTY, "E   AssertionError: boom"))
    else:  # a pass under the quarantine's xfail marker, as an in-place rank records it
        pairs.append((OUTCOME_PROPERTY, "xpassed"))
    result = '<skipped type="pytest.xfail" message="quarantined: slow"/>' if failed else ""
    return (
        f'<testcase classname="t" name="test_q" time="0.1"><properties>{_props(pairs)}'
        f"</properties>{result}</testcase>"
    )


def test_merge_junit_keeps_every_attempt_once_and_says_flaky(tmp_path):
    for rank in (0, 1):
        _rank_file(tmp_path, rank, _flaky_case())
    report = merge_junit([tmp_path])
    (test,) = report.tests
    assert (test.verdict, test.flaky, test.attempts) == ("passed", "pass", ATTEMPTS)
    assert report.summary_line().endswith("; 1 flaky (failed, then passed a rerun)")
    out = tmp_path / "merged.xml"
    report.write_xml(out)
    (case,) = read_junit(out).cases
    names = [k for k, _ in case.properties]
    assert names.count(ATTEMPTS_PROPERTY) == 1 and names.count(FLAKY_PROPERTY) == 1
    assert not [k for k in names if k.endswith(ATTEMPTS_PROPERTY) and k != ATTEMPTS_PROPERTY]
    # The merged file reads back as the same flaky test.
    summary = summarize([out])
    assert [(t["id"], t["outcome"], t["policy"]) for t in summary["flaky"]] == [
        ("t::test_flaky", "passed", "pass")
    ]
    assert summary["ok"] is True


def test_flaky_fail_is_a_failure_with_its_attempts(tmp_path):
    for rank in (0, 1):
        _rank_file(tmp_path, rank, _flaky_case("fail"))
    summary = summarize([tmp_path])
    assert summary["ok"] is False
    assert [(t["outcome"], t["policy"]) for t in summary["flaky"]] == [("failed", "fail")]
    (failing,) = summary["failing"]
    assert failing["attempts"] == [
        "attempt 1 failed: rank 1 failed; rank 0 passed",
        "attempt 2 passed",
    ]


def test_pages_and_the_gate_table_count_flaky_tests_apart(tmp_path):
    junit = tmp_path / "junit" / "dist"
    junit.mkdir(parents=True)
    for rank in (0, 1):
        _rank_file(junit, rank, _flaky_case())
    summary = summarize([junit])
    page = render_html(ReportData(summary=summary))
    assert '<section id="flaky"><h2>Flaky tests (1)</h2>' in page
    assert "attempt 1 failed: rank 1 failed; rank 0 passed<br>attempt 2 passed" in page
    md = render_markdown(ReportData(summary=summary))
    assert "### Flaky tests (1): failed, then passed a rerun" in md

    flaky = stage_flaky(junit)
    assert flaky == ["t::test_flaky — attempt 1 failed, attempt 2 passed"]
    table = summary_table([Outcome(stage="dist", status="passed", flaky=flaky)]).splitlines()
    assert table[-2] == "       ~ flaky: t::test_flaky — attempt 1 failed, attempt 2 passed"
    assert table[-1] == (
        "gate — 1 passed, 0 failed, 0 skipped (stages); 1 flaky tests (failed, then passed a rerun)"
    )
    plain = summary_table([Outcome(stage="dist", status="passed")]).splitlines()
    assert plain[-1] == "gate — 1 passed, 0 failed, 0 skipped (stages)"
    # The report's stage row counts them apart too.
    stage = {"tests": {"tests": 3, "passed": 3}, "flaky": flaky}
    assert present.stage_tests(stage) == "3 passed, 1 flaky"


@pytest.mark.parametrize(("failed", "outcome", "streak", "ready"), [
    (True, "failed", "0 of 5", False),
    (False, "passed", "5 of 5: ready to leave the list", True),
])  # fmt: skip
def test_quarantined_tests_are_listed_with_their_outcome(tmp_path, failed, outcome, streak, ready):
    for rank in (0, 1):
        _rank_file(tmp_path, rank, _quarantined_case(failed and rank == 1))
    summary = summarize([tmp_path])
    assert summary["ok"] is True
    (entry,) = summary["quarantined"]
    assert (entry["id"], entry["outcome"], entry["streak"], entry["ready"]) == (
        "t::test_q", outcome, streak, ready,
    )  # fmt: skip
    assert entry["message"] == ("AssertionError: boom" if failed else "")
    assert '<section id="quarantined">' in render_html(ReportData(summary=summary))
