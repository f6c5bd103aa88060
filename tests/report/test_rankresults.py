"""Per-rank results files: what a rank that died leaves, and merge-junit's fallback to it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rankgate import cli
from rankgate.harness.output import strip_ansi
from rankgate.harness.rankfiles import ResultsWriter, results_path
from rankgate.report.junit import merge_junit
from rankgate.report.junitfile import ReportInputError
from rankgate.report.rankresults import read_results

pytestmark = pytest.mark.unit


def junit_file(path: Path, *names: str) -> Path:
    cases = "".join(f'<testcase classname="t" name="{n}" time="0.1"/>' for n in names)
    props = '<properties><property name="world_size" value="2"/></properties>'
    path.write_text(f'<testsuites><testsuite name="pytest">{props}{cases}</testsuite></testsuites>')
    return path


def died_in(path: Path, rank: int, finished: list[str], running: str) -> Path:
    """A results file as a rank leaves it when it dies while running ``running``."""
    writer = ResultsWriter(path, rank, 2)
    for name in finished:
        writer.begin("t", name)
        writer.end({"classname": "t", "name": name, "outcome": "passed", "stdout": "hi\n"})
    writer.begin("t", running)
    writer.close(remove=False)
    return path


def main(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    monkeypatch.setattr(sys, "argv", ["rankgate"])
    return cli.main(list(argv))


def test_the_test_a_rank_died_in_is_crashed_and_earlier_ones_kept(tmp_path: Path) -> None:
    path = died_in(tmp_path / "junit.rank1.jsonl", 1, ["test_a"], "test_b")
    read = read_results(path)
    assert (read.rank, read.world_size) == (1, 2)
    outcomes = {c.name: (c.outcome, c.message, c.system_out) for c in read.cases}
    assert outcomes == {
        "test_a": ("passed", "", "hi\n"),
        "test_b": ("failed", "crashed on rank 1: the rank ended while running this test", ""),
    }


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = died_in(tmp_path / "junit.rank1.jsonl", 1, ["test_a"], "test_b")
    with path.open("a") as f:
        f.write('{"event": "end", "classname": "t", "na')
    assert {c.name: c.outcome for c in read_results(path).cases} == {
        "test_a": "passed", "test_b": "failed",
    }  # fmt: skip


def test_a_torn_line_in_the_middle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junit.rank1.jsonl"
    path.write_text(json.dumps({"event": "rank", "rank": 1}) + "\n{bad\n{}\n")
    with pytest.raises(ReportInputError, match=r"junit.rank1.jsonl:2: not a results record"):
        read_results(path)


def test_merge_of_a_directory_falls_back_to_the_dead_ranks_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    junit_file(tmp_path / "junit.rank0.xml", "test_a", "test_b", "test_c")
    died_in(tmp_path / "junit.rank1.jsonl", 1, ["test_a"], "test_b")
    report = merge_junit([tmp_path])
    assert report.verdicts == {"t::test_a": "passed", "t::test_b": "failed", "t::test_c": "error"}
    tests = {t.name: t for t in report.tests}
    assert tests["test_b"].message == "rank 1 crashed; rank 0 passed"
    assert "crashed on rank 1: the rank ended while running this test" in tests["test_b"].details
    assert tests["test_c"].message == "rank 1 missing; rank 0 passed"
    # each rank's outcome, as the message words it (rank 1's used to read "failed")
    assert tests["test_b"].rank_outcomes == {0: "passed", 1: "crashed"}
    assert main(monkeypatch, "merge-junit", str(tmp_path)) == 1
    out = capsys.readouterr().out
    assert "FAILED t::test_b: rank 1 crashed; rank 0 passed" in out
    assert "no per-rank JUnit files" not in out


def test_a_named_junit_file_that_is_missing_gives_way_to_its_results(tmp_path: Path) -> None:
    zero = junit_file(tmp_path / "junit.rank0.xml", "test_a")
    died_in(tmp_path / "junit.rank1.jsonl", 1, [], "test_a")
    report = merge_junit([zero, tmp_path / "junit.rank1.xml"])
    assert report.verdicts == {"t::test_a": "failed"}
    assert report.tests[0].failing_ranks == (1,)


def test_a_rank_with_both_files_is_read_from_its_junit(tmp_path: Path) -> None:
    junit_file(tmp_path / "junit.rank0.xml", "test_a")
    junit_file(tmp_path / "junit.rank1.xml", "test_a")
    died_in(tmp_path / "junit.rank1.jsonl", 1, [], "test_a")  # stale: the JUnit file wins
    assert merge_junit([tmp_path]).verdicts == {"t::test_a": "passed"}


def test_results_path_sits_beside_the_junit_file() -> None:
    assert results_path("out/junit.rank3.xml") == Path("out/junit.rank3.jsonl")


def test_strip_ansi() -> None:
    assert strip_ansi("\x1b[91mred\x1b[0m and \x1b[1;31mbold\x1b[m") == "red and bold"


@pytest.mark.parametrize("as_dir", [False, True], ids=["file", "directory"])
def test_merge_refuses_to_write_over_an_input(
    as_dir: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rank0 = junit_file(tmp_path / "junit.rank0.xml", "test_a")
    junit_file(tmp_path / "junit.rank1.xml", "test_a")
    before = rank0.read_bytes()
    given = [str(tmp_path)] if as_dir else [str(rank0), str(tmp_path / "junit.rank1.xml")]
    assert main(monkeypatch, "merge-junit", *given, "-o", str(rank0)) == 2
    err = capsys.readouterr().err
    assert err == (
        f"rankgate merge-junit: error: -o {rank0} is one of the inputs; "
        "write the merge to another file\n"
    )
    assert rank0.read_bytes() == before
    assert merge_junit([tmp_path]).verdicts == {"t::test_a": "passed"}


def test_the_report_reads_a_dead_ranks_results_as_merge_junit_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # out/junit/ as an in-place run leaves it when rank 1 dies in test_b: rank 0's JUnit
    # file, rank 1's results file. Without the results file the report counted every test
    # as an error on a missing rank (3 tests for 2, 0 passed).
    run = tmp_path / "out" / "junit" / "inplace"
    run.mkdir(parents=True)
    cases = (
        '<testcase classname="t" name="test_a" time="0.1"/>'
        '<testcase classname="t" name="test_b" time="0.1"><failure message="reset"/></testcase>'
    )
    props = '<properties><property name="world_size" value="2"/></properties>'
    (run / "junit.rank0.xml").write_text(
        f'<testsuites><testsuite name="pytest">{props}{cases}</testsuite></testsuites>'
    )
    died_in(run / "junit.rank1.jsonl", 1, ["test_a"], "test_b")
    assert main(monkeypatch, "report", "--out", str(tmp_path / "out")) == 1
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["totals"] == {
        "tests": 2, "passed": 1, "failed": 1, "error": 0, "not run": 0, "skipped": 0, "xfailed": 0,
        "xpassed": 0,
    }  # fmt: skip
    assert [f["message"] for f in report["failing"]] == ["rank 1 crashed; rank 0 failed"]
    assert [f["ranks"] for f in report["failing"]] == [{"0": "failed", "1": "crashed"}]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "#### `t::test_b` rank 1 crashed; rank 0 failed" in summary
