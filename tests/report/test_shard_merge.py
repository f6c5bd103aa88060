"""Shards merged into one verdict (rankgate.report.shard_merge): nodes named, lost tests not run."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from rankgate.report.junit import merge_files
from rankgate.report.junitfile import CaseResult, JUnitFile
from rankgate.report.shard_merge import ShardRun, case_of, merge_shards

pytestmark = pytest.mark.unit


def _report(names: list[str], outcome: str = "passed", world: int = 2):
    files = [
        JUnitFile(
            path=f"junit.rank{rank}.xml",
            rank=rank,
            world_size=world,
            suite_names=("pytest",),
            cases=[
                CaseResult(classname="suites.x.test_a", name=name, outcome=outcome, rank=rank)
                for name in names
            ],
        )
        for rank in range(world)
    ]
    return merge_files(files, world)


@pytest.mark.parametrize(
    ("node_id", "case"),
    [
        ("suites/x/test_a.py::test_b", ("suites.x.test_a", "test_b")),
        ("suites/x/test_a.py::TestC::test_d[1-x]", ("suites.x.test_a.TestC", "test_d[1-x]")),
        ("test_a.py::test_b", ("test_a", "test_b")),
    ],
)
def test_case_of_is_how_pytest_names_a_case(node_id, case):
    assert case_of(node_id) == case


def test_shards_merge_into_one_verdict_naming_each_node(tmp_path):
    runs = [
        ShardRun(
            index=1, count=2, job_id="11", node="node1", ended="completed",
            report=_report(["test_one"]), expected=("suites/x/test_a.py::test_one",),
        ),
        ShardRun(
            index=2, count=2, job_id="12", node="node2", ended="completed",
            report=_report(["test_two", "test_three"]),
            expected=("suites/x/test_a.py::test_two", "suites/x/test_a.py::test_three"),
        ),
    ]  # fmt: skip
    merged = merge_shards(runs)
    assert merged.ok and merged.counts["passed"] == 3
    assert {t.name: dict(t.labels)["node"] for t in merged.tests} == {
        "test_one": "node1",
        "test_two": "node2",
        "test_three": "node2",
    }
    merged.write_xml(tmp_path / "m.xml")
    root = ET.parse(tmp_path / "m.xml").getroot()
    suite_props = [
        p.get("value") for p in root.find("testsuite/properties") if p.get("name") == "shard"
    ]
    assert suite_props[0].startswith("1/2: job 11 on node1, completed, 1 test on ranks 0, 1")
    assert suite_props[1].startswith("2/2: job 12 on node2, completed, 2 tests")
    case = root.find("testsuite/testcase[@name='test_two']")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert (props["shard"], props["node"], props["job"]) == ("2/2", "node2", "12")


def test_a_lost_shard_reports_each_of_its_tests_not_run():
    runs = [
        ShardRun(index=1, count=2, job_id="11", node="node1", ended="completed",
                 report=_report(["test_one"]), expected=("suites/x/test_a.py::test_one",)),
        ShardRun(index=2, count=2, job_id="12", node="node2", ended="node-fail", report=None,
                 expected=("suites/x/test_a.py::test_two", "suites/x/test_a.py::test_three")),
    ]  # fmt: skip
    merged = merge_shards(runs)
    assert not merged.ok
    assert merged.verdicts == {
        "suites.x.test_a::test_one": "passed",
        "suites.x.test_a::test_two": "not run",
        "suites.x.test_a::test_three": "not run",
    }
    lost = merged.tests[1]
    assert lost.message == "shard 2/2 (job 12 on node2) ended node-fail and left no results"
    assert "3 tests on ranks 0, 1 of world 2: 1 passed" in merged.summary_line()
    assert merged.summary_line().endswith("2 not run")


def test_a_test_its_shard_never_reported_is_not_run():
    runs = [
        ShardRun(index=1, count=1, job_id="11", node="node1", ended="completed",
                 report=_report(["test_one"]),
                 expected=("suites/x/test_a.py::test_one", "suites/x/test_a.py::test_gone")),
    ]  # fmt: skip
    merged = merge_shards(runs)
    assert merged.verdicts["suites.x.test_a::test_gone"] == "not run"
    assert merged.tests[-1].message == ("shard 1/1 (job 11 on node1, completed) never reported it")


def test_a_lost_shard_whose_tests_are_unknown_is_still_an_error():
    runs = [
        ShardRun(index=1, count=2, job_id="11", node="node1", ended="completed",
                 report=_report(["test_one"])),
        ShardRun(index=2, count=2, job_id="", node="", ended="submit-error"),
    ]  # fmt: skip
    merged = merge_shards(runs)
    assert not merged.ok
    assert merged.verdicts["rankgate.merge::lost_shard_2"] == "error"


def _shard_folder(folder, k, expected, *, node, outcome, ran=()):
    import json

    folder.mkdir()
    (folder / "shard.json").write_text(json.dumps({"shard": k, "shards": 2, "expected": expected}))
    summary = {"job_id": str(10 + k), "node": node, "outcome": outcome, "world_size": 2}
    (folder / "summary.json").write_text(json.dumps(summary))
    for rank in range(2) if ran else ():
        cases = "".join(
            f'<testcase classname="suites.x.test_a" name="{n}" time="0.1"/>' for n in ran
        )
        (folder / f"junit.rank{rank}.xml").write_text(
            f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>'
        )
    return str(folder)


def test_merge_junit_shards_merges_job_folders_again(tmp_path, capsys):
    from rankgate.cli import main

    one = _shard_folder(
        tmp_path / "s1", 1, ["suites/x/test_a.py::test_one"], node="node1",
        outcome="completed", ran=["test_one"],
    )  # fmt: skip
    two = _shard_folder(
        tmp_path / "s2", 2, ["suites/x/test_a.py::test_two"], node="node2", outcome="node-fail"
    )
    assert main(["merge-junit", "--shards", one, two, "-o", str(tmp_path / "m.xml")]) == 1
    out = capsys.readouterr().out
    assert "shard 1/2: job 11 on node1, completed, 1 test on ranks 0, 1 of world 2" in out
    assert "shard 2/2: job 12 on node2, node-fail, no results" in out
    assert (
        "NOT RUN suites.x.test_a::test_two: shard 2/2 (job 12 on node2) ended node-fail "
        "and left no results"
    ) in out
    assert out.rstrip().endswith("1 not run -> " + str(tmp_path / "m.xml"))
    assert main(["merge-junit", "--shards", one]) == 0
    assert main(["merge-junit", "--shards", str(tmp_path / "none")]) == 2
    assert "not a shard's job folder" in capsys.readouterr().err


def test_the_report_lists_each_shard_where_it_ran(tmp_path):
    from rankgate.report.collect import collect
    from rankgate.report.html import render_html
    from rankgate.report.markdown import render_markdown

    runs = [
        ShardRun(index=1, count=2, job_id="11", node="node1", ended="completed",
                 report=_report(["test_one"]), expected=("suites/x/test_a.py::test_one",)),
        ShardRun(index=2, count=2, job_id="12", node="node2", ended="node-fail", report=None,
                 expected=("suites/x/test_a.py::test_two",)),
    ]  # fmt: skip
    (tmp_path / "junit").mkdir()
    merge_shards(runs).write_xml(tmp_path / "junit" / "hpc.xml")
    data = collect(tmp_path)
    assert not data.ok
    (group,) = data.summary["groups"]
    assert [line.split(",")[0] for line in group["shards"]] == [
        "1/2: job 11 on node1",
        "2/2: job 12 on node2",
    ]
    md = render_markdown(data)
    assert "- shard 2/2: job 12 on node2, node-fail, no results" in md
    assert "1 not run: shard 2/2 (job 12 on node2) ended node-fail and left no results" in md
    assert "<li>shard 1/2: job 11 on node1, completed, 1 test on ranks 0, 1" in render_html(data)
