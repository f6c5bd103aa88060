"""rankgate report: totals, failing tests with their ranks, benchmark files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html import escape
from pathlib import Path

import gfm
import pytest

from rankgate import cli
from rankgate.report.json_summary import summarize
from rankgate.report.junit import ReportInputError, merge_junit
from rankgate.report.results import read_results

pytestmark = pytest.mark.unit

HARNESS_BENCH = [{"world": 2, "pool_ms_per_test": 4.1, "spawn_ms_per_test": 2210.0}]


@pytest.fixture(scope="module")
def plain_junit(tmp_path_factory: pytest.TempPathFactory, inner_env: dict[str, str]) -> Path:
    """An ordinary (rank-less) pytest report: one pass, one failure, one skip."""
    directory = tmp_path_factory.mktemp("plain")
    (directory / "test_plain.py").write_text(
        "import pytest\n"
        "def test_ok():\n    pass\n"
        "def test_bad():\n    assert 1 == 2, 'one is not two'\n"
        "def test_skip():\n    pytest.skip('later')\n"
    )
    path = directory / "unit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={path}",
         "test_plain.py"],
        cwd=directory, capture_output=True, timeout=120,
        env=inner_env,
    )
    assert path.is_file()
    return path


def test_rank_files_and_plain_file_and_bench(
    ranked_junit: list[Path], plain_junit: Path, tmp_path: Path
) -> None:
    bench = tmp_path / "harness.json"
    bench.write_text(json.dumps(HARNESS_BENCH))
    got = summarize([*ranked_junit, plain_junit], [bench])
    assert got["ok"] is False
    assert got["totals"] == {
        "tests": 13, "passed": 4, "failed": 3, "error": 3, "not run": 0, "skipped": 2, "xfailed": 1,
        "xpassed": 0,
    }  # fmt: skip
    assert got["xfails"] == [
        {"reason": "known bug", "count": 1, "examples": ["test_ranked::test_xfail"]}
    ]
    assert [(g["reason"], g["count"]) for g in got["skips"]] == [("later", 1), ("no GPU here", 1)]
    ranked_dir = str(ranked_junit[0].parent)
    assert [(g["source"], g["ranks"], g["totals"]["tests"]) for g in got["groups"]] == [
        (str(plain_junit), None, 3),
        (ranked_dir, [0, 1, 2], 10),
    ]
    failing = {f["id"]: f for f in got["failing"]}
    assert sorted(failing) == [
        "test_plain::test_bad",
        "test_ranked::test_error_on_rank2",
        "test_ranked::test_fail_everywhere",
        "test_ranked::test_fail_on_rank1",
        "test_ranked::test_only_on_rank0",
        "test_ranked::test_skip_on_rank1",
    ]
    assert failing["test_ranked::test_fail_on_rank1"] == {
        "id": "test_ranked::test_fail_on_rank1",
        "outcome": "failed",
        "source": ranked_dir,
        "failing_ranks": [1],
        "ranks": {"0": "passed", "1": "failed", "2": "passed"},
        "message": "rank 1 failed; ranks 0, 2 passed",
    }
    assert failing["test_ranked::test_only_on_rank0"]["failing_ranks"] == [1, 2]
    assert failing["test_plain::test_bad"] == {
        "id": "test_plain::test_bad",
        "outcome": "failed",
        "source": str(plain_junit),
        "failing_ranks": None,
        "ranks": None,
        "message": "AssertionError: one is not two",
    }
    assert got["bench"] == [{"file": str(bench), "data": HARNESS_BENCH}]


def test_merged_file_keeps_its_ranks(ranked_junit: list[Path], tmp_path: Path) -> None:
    merged = tmp_path / "merged.xml"
    merge_junit(ranked_junit).write_xml(merged)
    direct = summarize(ranked_junit)
    again = summarize([merged])
    assert again["totals"] == direct["totals"]
    strip = [{k: v for k, v in f.items() if k != "source"} for f in direct["failing"]]
    assert [{k: v for k, v in f.items() if k != "source"} for f in again["failing"]] == strip


def test_clean_runs_are_ok(clean_junit: list[Path]) -> None:
    got = summarize(clean_junit)
    assert got["ok"] is True
    assert got["failing"] == []
    assert got["totals"] == {
        "tests": 3, "passed": 3, "failed": 0, "error": 0, "not run": 0, "skipped": 0, "xfailed": 0,
        "xpassed": 0,
    }  # fmt: skip


def test_bench_file_with_log_lines_before_the_json(tmp_path: Path) -> None:
    bench = tmp_path / "bench.txt"
    bench.write_text("warming up\nworld 2: pool 4.1 ms\n" + json.dumps(HARNESS_BENCH) + "\n")
    assert summarize([], [bench])["bench"] == [{"file": str(bench), "data": HARNESS_BENCH}]


def test_bad_input(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text("no json here\n")
    with pytest.raises(ReportInputError, match=f"^{re.escape(str(bench))}: not JSON"):
        summarize([], [bench])
    with pytest.raises(ReportInputError, match=r"^no JUnit or benchmark files given$"):
        summarize([], [])
    missing = tmp_path / "nope.xml"
    with pytest.raises(ReportInputError, match=f"^{re.escape(str(missing))}: no such file$"):
        summarize([missing])


def test_command(
    ranked_junit: list[Path], clean_junit: list[Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(sys, "argv", ["rankgate"])  # cli.main rewrites sys.argv
    monkeypatch.chdir(tmp_path)  # report.html and summary.md go to ./out
    bench = tmp_path / "harness.json"
    bench.write_text(json.dumps(HARNESS_BENCH))
    out = tmp_path / "summary.json"
    args = ["report", *map(str, ranked_junit), "--bench", str(bench), "-o", str(out), "--json"]
    assert cli.main(args) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out) == json.loads(out.read_text())
    assert json.loads(captured.out)["totals"]["tests"] == 10
    assert captured.err == (
        "rankgate report: FAILED: 10 tests: 3 passed, 2 failed, 3 error, 0 not run, 1 skipped, "
        "1 xfailed, 0 xpassed; 1 benchmark files; wrote out/report.html and out/summary.md\n"
    )
    assert (tmp_path / "out" / "report.html").read_text().startswith("<!DOCTYPE html>")
    # Without --json: the verdict line alone; summary.md links the page in the real --out.
    assert cli.main(["report", *map(str, clean_junit), "--out", "rep"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("rankgate report: PASSED: 3 tests: 3 passed, ")
    assert captured.out.endswith("wrote rep/report.html and rep/summary.md\n")
    assert (captured.out.count("\n"), captured.err) == (1, "")
    assert "`rep/report.html`" in (tmp_path / "rep" / "summary.md").read_text()
    assert cli.main(["report", str(tmp_path / "missing.xml")]) == 2
    assert capsys.readouterr().err == (
        f"rankgate report: error: {tmp_path / 'missing.xml'}: no such file\n"
    )


def test_a_test_a_stopped_run_never_ran_is_red_in_the_report(tmp_path: Path) -> None:
    # The report counts merge-junit's "not run" apart from errors, never as passed, with
    # the reason the run gave (not the wrapper pytest's JUnit writer puts around it).
    case = (
        '<testcase classname="t" name="test_later" time="0">'
        '<error message="failed on setup with &quot;not run: rank 0 stopped the run: t::a'
        ' hung&quot;" /></testcase>'
    )
    for rank in (0, 1):
        (tmp_path / f"junit.rank{rank}.xml").write_text(
            f'<testsuites><testsuite name="pytest" tests="1"><properties>'
            f'<property name="rank" value="{rank}"/><property name="world_size" value="2"/>'
            f"</properties>{case}</testsuite></testsuites>"
        )
    (group,) = read_results([tmp_path])
    (result,) = group.results
    assert result.outcome == "not run"
    assert result.reason == "ranks 0, 1 not run (rank 0 stopped the run: t::a hung)"
    assert group.totals == {
        "tests": 1, "passed": 0, "failed": 0, "error": 0, "not run": 1, "skipped": 0,
        "xfailed": 0, "xpassed": 0,
    }  # fmt: skip
    summary = summarize([tmp_path])
    assert summary["ok"] is False and summary["failing"] == []
    assert summary["not_run"] == [
        {"reason": "ranks 0, 1 not run (rank 0 stopped the run: t::a hung)", "count": 1,
         "examples": ["t::test_later"]}
    ]  # fmt: skip
    # A file written by merge-junit (or any file without ranks) is read case by case.
    plain = tmp_path / "plain" / "merged.xml"
    plain.parent.mkdir()
    plain.write_text(f'<testsuites><testsuite name="pytest" tests="1">{case}</testsuite></testsuites>')
    (group,) = read_results([plain])
    assert [(r.outcome, r.reason) for r in group.results] == [
        ("not run", "rank 0 stopped the run: t::a hung")
    ]


def test_the_report_names_the_test_that_stopped_the_run_and_folds_the_tests_never_run(
    tmp_path: Path,
) -> None:
    # In place, rank 1 raised after a collective; rank 0 stopped the run: the report has
    # one failed test (named as the one that stopped the run) and 2 not run, listed once.
    from rankgate.report.collect import collect
    from rankgate.report.html import render_html
    from rankgate.report.markdown import render_markdown

    why = "rank 0 stopped the run: t/test_x.py::test_raise was still running 3 s after rank 1 failed"
    later = (
        '<testcase classname="t.test_x" name="test_n{n}" time="0">'
        f'<error message="failed on setup with &quot;not run: {why}&quot;" /></testcase>'
    )
    for rank in (0, 1):
        failed = (
            '<testcase classname="t.test_x" name="test_raise" time="3.2">'
            f'<failure message="RuntimeError: rank{rank} broke">tb</failure></testcase>'
        )
        (tmp_path / f"junit.rank{rank}.xml").write_text(
            f'<testsuites><testsuite name="pytest"><properties>'
            f'<property name="rank" value="{rank}"/><property name="world_size" value="2"/>'
            f"</properties>{failed}{later.format(n=1)}{later.format(n=2)}</testsuite></testsuites>"
        )
    data = collect(tmp_path / "out", [tmp_path])
    assert [f.id for f in data.failures] == ["t.test_x::test_raise"]
    assert data.failures[0].stopped_run
    assert data.summary["totals"]["not run"] == 2 and data.summary["totals"]["error"] == 0
    md = render_markdown(data)
    assert "### Failed tests (1)\n\n#### stopped the run: `t.test_x::test_raise` " in md
    assert f"### Not run (2)\n\n- 2 not run: ranks 0, 1 not run ({why})\n" in md
    assert "<details><summary>the 2 tests not run</summary>" in md
    html = render_html(data)
    assert '<div class="tile not-run" data-outcome="not run"><b>2</b>not run</div>' in html
    assert '<section id="not-run"><h2>Not run (2)</h2>' in html


def _comparison_file(path: Path, new: str, verdicts: list[str]) -> Path:
    rows = [
        {"metric": "pool_median_ms", "size": f"world {2 + i}", "base": 2.0, "new": 2.0,
         "ratio": 1.0, "change": 0.0, "threshold": 1.5, "verdict": v}
        for i, v in enumerate(verdicts)
    ]  # fmt: skip
    comparison = {"benchmark": "harness", "base": "benchmarks/baselines/cpu/harness.json",
                  "new": new, "rows": rows, "regressions": [], "notes": []}  # fmt: skip
    path.write_text(json.dumps({"format": "rankgate.compare/1", "comparisons": [comparison]}))
    return path


def test_the_summary_leads_with_this_runs_benchmark_and_folds_the_committed_check(tmp_path):
    from rankgate.report.collect import collect
    from rankgate.report.markdown import render_markdown

    committed = _comparison_file(
        tmp_path / "compare-committed.json", "3 committed runs of cpu", ["same"] * 40
    )
    this_run = _comparison_file(tmp_path / "compare.json", "out/bench/harness.json",
                                ["inconclusive", "same"])  # fmt: skip
    md = render_markdown(collect(tmp_path / "out", bench=[committed, this_run]))
    first = md.index("### Benchmark: harness: out/bench/harness.json against ")
    assert md[first:].startswith(
        "### Benchmark: harness: out/bench/harness.json against "
        "benchmarks/baselines/cpu/harness.json: inconclusive (1 within the baseline's spread)"
    )
    line = (
        "<details><summary>Committed results against their baselines: 1 comparisons, 40 rows: "
        "40 same</summary>"
    )
    assert md.index(line) > first
    assert md.count("| pool_median_ms |") == 2  # this run's rows; the committed ones folded


HOSTILE = '<img src=x onerror="alert(1)">'


def test_text_from_the_run_is_escaped_in_summary_md_and_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A skip reason, an xfail reason and a stage's note are the run's text, not markup:
    # shown as written in both pages, never rendered as an element.
    junit = tmp_path / "out" / "junit" / "unit.xml"
    junit.parent.mkdir(parents=True)
    junit.write_text(
        '<testsuites><testsuite name="pytest" tests="3">'
        '<testcase classname="t" name="test_ok" time="0.1" />'
        f'<testcase classname="t" name="test_skip" time="0"><skipped message="{escape(HOSTILE)}" />'
        "</testcase>"
        f'<testcase classname="t" name="test_x" time="0"><skipped type="pytest.xfail" '
        f'message="{escape(HOSTILE)}" /></testcase></testsuite></testsuites>'
    )
    (tmp_path / "out" / "stages").mkdir()
    (tmp_path / "out" / "stages" / "unit.json").write_text(
        json.dumps({"stage": "unit", "status": "passed", "reason": HOSTILE, "seconds": 1.0})
    )
    monkeypatch.setattr(sys, "argv", ["rankgate"])  # cli.main rewrites sys.argv
    assert cli.main(["report", "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "<img" not in md
    assert md.count('&lt;img src=x onerror="alert(1)"&gt;') == 3  # the stage, the skip, the xfail
    rendered = gfm.render(md)
    assert "<img" not in rendered and rendered.count("&lt;img src=x onerror=") == 3
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<img" not in page and page.count("&lt;img src=x onerror=") == 3
