"""rankgate merge-junit: verdicts from real per-rank pytest runs and from crafted files."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rankgate import cli
from rankgate.report.junit import ReportInputError, merge_junit, read_junit
from rankgate.report.junitfile import NO_TEST

pytestmark = pytest.mark.unit


def junit(path: Path, cases: str, suite_props: str = "", root: str = "testsuites") -> Path:
    """A JUnit file holding ``cases`` (testcase elements) in one testsuite."""
    props = f"<properties>{suite_props}</properties>" if suite_props else ""
    suite = f'<testsuite name="pytest">{props}{cases}</testsuite>'
    path.write_text(f"<testsuites>{suite}</testsuites>" if root == "testsuites" else suite)
    return path


def case(name: str, body: str = "", classname: str = "t") -> str:
    return f'<testcase classname="{classname}" name="{name}" time="0.1">{body}</testcase>'


def main(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    monkeypatch.setattr(sys, "argv", ["rankgate"])  # cli.main rewrites sys.argv
    return cli.main(list(argv))


# ----------------------------------------------------------------- real pytest runs


def test_real_runs_exact_verdicts(ranked_junit: list[Path], expected_verdicts: dict) -> None:
    report = merge_junit(ranked_junit)
    assert report.verdicts == expected_verdicts
    assert report.counts == {
        "tests": 10, "passed": 3, "failed": 2, "error": 3, "skipped": 1,
        "xfailed": 1, "xpassed": 0, "not run": 0,
    }
    assert report.ranks == (0, 1, 2)
    assert report.world_size == 3
    assert not report.ok


def test_real_runs_messages_name_the_ranks(ranked_junit: list[Path]) -> None:
    tests = {t.test_id: t for t in merge_junit(ranked_junit).tests}
    messages = {i: t.message for i, t in tests.items() if t.verdict != "passed"}
    assert messages == {
        "test_ranked::test_fail_on_rank1": "rank 1 failed; ranks 0, 2 passed",
        "test_ranked::test_error_on_rank2": "rank 2 error; ranks 0, 1 passed",
        "test_ranked::test_skip_everywhere": "no GPU here",
        "test_ranked::test_skip_on_rank1": (
            "ranks disagree: rank 1 skipped; ranks 0, 2 passed"
        ),
        "test_ranked::test_only_on_rank0": "ranks 1, 2 missing; rank 0 passed",
        "test_ranked::test_fail_everywhere": "ranks 0, 1, 2 failed",
        "test_ranked::test_xfail": "known bug",
    }
    everywhere = tests["test_ranked::test_fail_everywhere"]
    for rank in range(3):
        assert f"----- rank {rank}: failed: ValueError: boom on rank {rank}" in everywhere.details
    assert everywhere.failing_ranks == (0, 1, 2)
    one = tests["test_ranked::test_fail_on_rank1"]
    assert one.details.startswith("----- rank 1: failed: AssertionError: rank 1 is broken")
    assert "rank 0" not in one.details  # only the failing rank's text
    error = tests["test_ranked::test_error_on_rank2"]
    assert "RuntimeError: fixture broke on rank 2" in error.details
    disagree = tests["test_ranked::test_skip_on_rank1"]
    assert "----- rank 1: skipped: rank 1 skips" in disagree.details
    assert "----- rank 0: passed" in disagree.details
    assert tests["test_ranked::test_only_on_rank0"].rank_outcomes == {
        0: "passed", 1: "missing", 2: "missing",
    }


def test_real_runs_written_xml(
    ranked_junit: list[Path], expected_verdicts: dict, tmp_path: Path
) -> None:
    out = tmp_path / "merged.xml"
    merge_junit(ranked_junit).write_xml(out)
    suite = ET.parse(out).getroot().find("testsuite")
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "10", "failures": "2", "errors": "3", "skipped": "2",
    }
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    failure = cases["test_fail_on_rank1"].find("failure")
    assert failure.get("message") == "rank 1 failed; ranks 0, 2 passed"
    assert "AssertionError: rank 1 is broken" in failure.text
    assert cases["test_skip_on_rank1"].find("error") is not None
    assert cases["test_xfail"].find("skipped").get("message") == "known bug"
    assert cases["test_pass"].find("failure") is None
    out_text = cases["test_pass"].findtext("system-out")
    for rank in range(3):
        assert f"[rank {rank}] hello from rank {rank}" in out_text
    assert "[rank 2] stderr of rank 2" in cases["test_fail_everywhere"].findtext("system-err")
    props = {p.get("name"): p.get("value") for p in cases["test_only_on_rank0"].iter("property")}
    assert props == {
        "ranks": "0", "rank_outcomes": "0=passed,1=missing,2=missing", "failing_ranks": "1,2",
    }
    # The merged file is ordinary JUnit: it reads back with the same verdicts.
    back = {c.test_id: c.outcome for c in read_junit(out).cases}
    assert back == expected_verdicts


def test_command_on_failing_runs(
    ranked_junit: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "merged.xml"
    assert main(monkeypatch, "merge-junit", *map(str, ranked_junit), "-o", str(out)) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        "rankgate merge-junit: 10 tests on ranks 0, 1, 2 of world 3: "
        f"3 passed, 2 failed, 3 error, 1 skipped, 1 xfailed, 0 xpassed, 0 not run -> {out}"
    )
    assert "FAILED test_ranked::test_fail_on_rank1: rank 1 failed; ranks 0, 2 passed" in lines
    assert "ERROR test_ranked::test_only_on_rank0: ranks 1, 2 missing; rank 0 passed" in lines
    assert out.is_file()


def test_command_json(
    ranked_junit: list[Path], expected_verdicts: dict, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(monkeypatch, "merge-junit", "--json", *map(str, ranked_junit)) == 1
    captured = capsys.readouterr()
    got = json.loads(captured.out)
    assert got["counts"] == {
        "tests": 10, "passed": 3, "failed": 2, "error": 3, "skipped": 1,
        "xfailed": 1, "xpassed": 0, "not run": 0,
    }
    assert {t["id"]: t["verdict"] for t in got["tests"]} == expected_verdicts
    by_id = {t["id"]: t for t in got["tests"]}
    assert by_id["test_ranked::test_error_on_rank2"]["ranks"] == {
        "0": "passed", "1": "passed", "2": "error",
    }
    assert captured.err.startswith("rankgate merge-junit: 10 tests")


def test_command_on_clean_runs_exits_0(
    clean_junit: list[Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A directory stands for its per-rank files.
    assert main(monkeypatch, "merge-junit", str(clean_junit[0].parent)) == 0
    assert capsys.readouterr().out == (
        "rankgate merge-junit: 3 tests on ranks 0, 1 of world 2: "
        "3 passed, 0 failed, 0 error, 0 skipped, 0 xfailed, 0 xpassed, 0 not run\n"
    )


# ----------------------------------------------------------------- crafted files


def test_times_slowest_rank_per_test_summed_over_tests(tmp_path: Path) -> None:
    files = [
        junit(tmp_path / "junit.rank0.xml", '<testcase name="a" time="1.0"/>'
                                            '<testcase name="b" time="0.5"/>'),
        junit(tmp_path / "junit.rank1.xml", '<testcase name="a" time="2.0"/>'
                                            '<testcase name="b" time="0.25"/>'),
    ]
    out = tmp_path / "merged.xml"
    merge_junit(files).write_xml(out)
    suite = ET.parse(out).getroot().find("testsuite")
    assert suite.get("time") == "2.500"
    assert [c.get("time") for c in suite.iter("testcase")] == ["2.000", "0.500"]


def test_disagreement_names_what_each_rank_did(tmp_path: Path) -> None:
    files = [
        junit(tmp_path / "junit.rank0.xml", case("a")),
        junit(tmp_path / "junit.rank1.xml", case("a", '<skipped message="no data"/>')),
        junit(tmp_path / "junit.rank2.xml", case("a")),
    ]
    (test,) = merge_junit(files).tests
    assert (test.verdict, test.message) == (
        "error", "ranks disagree: rank 1 skipped; ranks 0, 2 passed",
    )
    assert "----- rank 1: skipped: no data" in test.details


def test_failure_wins_over_disagreement_and_missing(tmp_path: Path) -> None:
    files = [
        junit(tmp_path / "junit.rank0.xml", case("a", '<failure message="bad">tb0</failure>')),
        junit(tmp_path / "junit.rank1.xml", case("a", '<skipped message="s"/>')),
        junit(tmp_path / "junit.rank2.xml", case("b")),
        junit(tmp_path / "junit.rank3.xml", case("a", '<error message="setup">tb3</error>')),
    ]
    a = merge_junit(files).tests[0]
    assert a.verdict == "failed"
    assert a.message == "rank 0 failed; rank 3 error; rank 2 missing; rank 1 skipped"
    assert a.failing_ranks == (0, 2, 3)
    assert a.details == (
        "----- rank 0: failed: bad\ntb0\n\n----- rank 3: error: setup\ntb3\n"
        "----- rank 2: no result for this test"
    )


def test_skipped_everywhere_with_different_reasons(tmp_path: Path) -> None:
    files = [
        junit(tmp_path / "junit.rank0.xml", case("a", '<skipped message="no GPU"/>')),
        junit(tmp_path / "junit.rank1.xml", case("a", '<skipped message="no NCCL"/>')),
    ]
    (test,) = merge_junit(files).tests
    assert (test.verdict, test.message) == ("skipped", "rank 0: no GPU; rank 1: no NCCL")


def test_call_failure_and_teardown_error_on_one_rank(tmp_path: Path) -> None:
    """pytest reports such a test twice in one file; the rank's worse outcome stands."""
    cases = case("a", '<failure message="call">c</failure>') + case(
        "a", '<error message="teardown">t</error>'
    )
    files = [junit(tmp_path / "junit.rank0.xml", cases), junit(tmp_path / "junit.rank1.xml",
                                                              case("a"))]
    (test,) = merge_junit(files).tests
    assert (test.verdict, test.message) == ("failed", "rank 0 failed; rank 1 passed")
    assert test.details == "----- rank 0: failed: call; teardown\nc\nt"


def test_rank_from_properties(tmp_path: Path) -> None:
    files = [
        junit(tmp_path / "a.xml", case("x"), '<property name="rank" value="1"/>'),
        junit(tmp_path / "b.xml", case("x", '<properties><property name="rank" value="0"/>'
                                             '</properties><failure message="m"/>')),
    ]
    report = merge_junit(files)
    assert report.ranks == (0, 1)
    assert report.tests[0].message == "rank 0 failed; rank 1 passed"


def test_bare_testsuite_root_and_other_rank_names(tmp_path: Path) -> None:
    files = [
        # dispatch's naming, and in-place mode's for --junitxml=results.xml
        junit(tmp_path / "junit-rank0.xml", case("x"), root="testsuite"),
        junit(tmp_path / "results.rank1.xml", case("x"), root="testsuite"),
    ]
    assert merge_junit(files).verdicts == {"t::x": "passed"}


def test_missing_rank_file_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [junit(tmp_path / f"junit.rank{r}.xml", case("x")) for r in (0, 2)]
    report = merge_junit(files, world_size=4)
    assert report.verdicts == {"rankgate.merge::missing_ranks": "error", "t::x": "error"}
    assert report.tests[0].message == "no JUnit file for ranks 1, 3 of world 4"
    assert report.tests[1].message == "ranks 1, 3 missing; ranks 0, 2 passed"
    assert main(monkeypatch, "merge-junit", "--world", "4", *map(str, files)) == 1
    assert "ERROR rankgate.merge::missing_ranks: no JUnit file for ranks 1, 3 of world 4" in (
        capsys.readouterr().out
    )


def test_world_size_property(tmp_path: Path) -> None:
    prop = '<property name="world_size" value="2"/>'
    report = merge_junit([junit(tmp_path / "junit.rank0.xml", case("x"), prop)])
    assert report.verdicts == {"rankgate.merge::missing_ranks": "error", "t::x": "error"}


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("setup", "error"),
    [
        (lambda d: d / "junit.rank0.xml", "junit.rank0.xml: no such file"),
        (lambda d: _write(d / "junit.rank0.xml", "not <xml"), "junit.rank0.xml: not valid XML"),
        (lambda d: _write(d / "junit.rank0.xml", "<html/>"),
         "junit.rank0.xml: not a JUnit file (root element <html>"),
        (lambda d: junit(d / "plain.xml", case("x")), "plain.xml: cannot tell its rank"),
        (lambda d: junit(d / "junit.rank1.xml", case("x"), '<property name="rank" value="0"/>'),
         "junit.rank1.xml: its name says rank 1 but its 'rank' property says 0"),
        (lambda d: junit(d / "junit.rank0.xml", case("x"), '<property name="rank" value="x"/>'),
         "junit.rank0.xml: property 'rank' is 'x', not an integer"),
        (lambda d: d, "holds no per-rank JUnit files"),
    ],
    ids=[
        "missing", "not-xml", "not-junit", "no-rank", "rank-conflict", "rank-not-int", "empty-dir",
    ],
)
def test_bad_input_exits_2_naming_the_file(
    setup, error: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = setup(tmp_path)
    with pytest.raises(ReportInputError, match="^" + re.escape(str(tmp_path))):
        merge_junit([path])
    assert main(monkeypatch, "merge-junit", str(path)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rankgate merge-junit: error: {tmp_path}")
    assert error in err


def test_no_files_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(monkeypatch, "merge-junit") == 2
    assert capsys.readouterr().err == "rankgate merge-junit: error: no JUnit files given\n"


def test_two_files_of_one_rank(tmp_path: Path) -> None:
    a = junit(tmp_path / "junit.rank0.xml", case("x"))
    (tmp_path / "old").mkdir()
    b = junit(tmp_path / "old" / "junit.rank0.xml", case("x"))
    with pytest.raises(ReportInputError, match=f"^{re.escape(str(a))} and {re.escape(str(b))} both "
                                               "hold rank 0$"):
        merge_junit([a, b])


def test_rank_beyond_world(tmp_path: Path) -> None:
    path = junit(tmp_path / "junit.rank5.xml", case("x"))
    with pytest.raises(ReportInputError, match=r"results for rank 5 but the world size is 2"):
        merge_junit([path], world_size=2)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ------------------------------------------------ outcomes counted apart, not run


XFAILED = '<skipped type="pytest.xfail" message="known bug"/>'
XPASSED = '<skipped message="xfail-marked test passes unexpectedly"/>'
MARKED_PASS = '<properties><property name="rankgate.outcome" value="xpassed"/></properties>'
"""An in-place rank's pass under an xfail marker: pytest's JUnit writes a plain pass."""
NOT_RUN = (
    '<error message="failed on setup with &quot;not run: rank 1 stopped the run: '
    't::hangs did not finish within the test\'s timeout of 5 s&quot;">not run</error>'
)


def test_xfailed_xpassed_and_not_run_are_counted_apart(tmp_path: Path) -> None:
    for rank, last in ((0, NOT_RUN), (1, "")):
        junit(
            tmp_path / f"junit.rank{rank}.xml",
            case("xf", XFAILED) + case("xp", XPASSED) + case("later", last)
            + case("skip", '<skipped message="no GPU"/>') + case("ok"),
        )
    report = merge_junit(sorted(tmp_path.glob("*.xml")))
    assert report.verdicts == {
        "t::xf": "xfailed", "t::xp": "xpassed", "t::later": "not run", "t::skip": "skipped",
        "t::ok": "passed",
    }
    assert report.counts == {
        "tests": 5, "passed": 1, "failed": 0, "error": 0, "skipped": 1, "xfailed": 1,
        "xpassed": 1, "not run": 1,
    }
    later = report.tests[2]
    assert later.message == (  # the reason, not only who did what
        "rank 0 not run (rank 1 stopped the run: "
        "t::hangs did not finish within the test's timeout of 5 s); rank 1 passed"
    )
    assert later.failing_ranks == (0,)
    assert not report.ok  # a test that never ran is red


@pytest.mark.parametrize(
    ("rank0", "verdict", "message"),
    [
        (MARKED_PASS, "xfailed", "known bug (rank 0 xpassed; rank 1 xfailed)"),
        (XPASSED, "xfailed", "known bug (rank 0 xpassed; rank 1 xfailed)"),
        ('<failure message="[XPASS(strict)] known bug"/>', "xfailed",
         "known bug (rank 0 xpassed; rank 1 xfailed)"),
        ('<failure message="AssertionError: 2 != 3"/>', "failed", "rank 0 failed; rank 1 xfailed"),
        ('<skipped message="no GPU"/>', "error", "ranks disagree: rank 1 xfailed; rank 0 skipped"),
    ],
    ids=["passed", "xpassed", "strict-xpass", "failed", "skipped"],
)  # fmt: skip
def test_an_xfail_test_that_failed_on_one_rank_and_passed_on_the_others_is_xfailed(
    tmp_path: Path, rank0: str, verdict: str, message: str
) -> None:
    # One test, its body run on every rank: it failed as expected, as the pool counts it.
    junit(tmp_path / "junit.rank0.xml", case("xf", rank0))
    junit(tmp_path / "junit.rank1.xml", case("xf", XFAILED))
    (test,) = merge_junit(sorted(tmp_path.glob("*.xml"))).tests
    assert (test.verdict, test.message) == (verdict, message)


def test_a_ranks_own_xfail_beside_plain_passes_is_a_disagreement_never_green(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # pytest.xfail() on rank 1 only, no marker: rank 0's pass is a plain one.
    junit(tmp_path / "junit.rank0.xml", case("xf"))
    junit(tmp_path / "junit.rank1.xml", case("xf", XFAILED))
    report = merge_junit(sorted(tmp_path.glob("*.xml")))
    (test,) = report.tests
    assert (test.verdict, test.message) == ("error", "ranks disagree: rank 1 xfailed; rank 0 passed")
    assert (report.counts["error"], report.counts["xfailed"], report.ok) == (1, 0, False)
    assert main(monkeypatch, "merge-junit", str(tmp_path)) == 1
    assert capsys.readouterr().out == (
        "ERROR t::xf: ranks disagree: rank 1 xfailed; rank 0 passed\n"
        "rankgate merge-junit: 1 test on ranks 0, 1 of world 2: 0 passed, 0 failed, 1 error, "
        "0 skipped, 0 xfailed, 0 xpassed, 0 not run\n"
    )


def test_merged_file_reads_back_with_the_same_outcomes(tmp_path: Path) -> None:
    for rank in (0, 1):
        junit(
            tmp_path / f"junit.rank{rank}.xml",
            case("xf", XFAILED) + case("xp", XPASSED) + case("later", NOT_RUN if rank else ""),
        )
    merged = merge_junit(sorted(tmp_path.glob("*.xml")))
    out = tmp_path / "merged" / "all.rank0.xml"
    out.parent.mkdir()
    merged.write_xml(out)
    suite = ET.parse(out).getroot()
    assert (suite.get("errors"), suite.get("skipped")) == ("1", "2")
    again = {c.name: c.outcome for c in read_junit(out).cases}
    assert again == {"xf": "xfailed", "xp": "xpassed", "later": "not run"}


def test_in_place_hang_is_worded_hung_with_its_likely_cause(tmp_path: Path) -> None:
    cause = "likely cause: rank 1 in user code at u.py:418; rank 0 waiting in barrier at u.py:419"
    for rank in (0, 1):
        message = f"rank {rank} hung (did not finish within the test's timeout of 5 s); {cause}"
        junit(tmp_path / f"junit.rank{rank}.xml", case("h", f'<failure message="{message}"/>'))
    (test,) = merge_junit(sorted(tmp_path.glob("*.xml"))).tests
    assert (test.verdict, test.message) == ("failed", f"ranks 0, 1 hung; {cause}")


# ------------------------------------------------ an interrupted run is never a pass

RANK_PROPS = '<property name="rank" value="{r}"/><property name="world_size" value="2"/>'
INTERRUPTED = (
    '<property name="rankgate.interrupted" value="rank {r} received SIGINT (Ctrl-C, or the '
    'launcher passing it on) while t.py::test_b ran"/>'
    '<property name="rankgate.interrupted_test" value="t::test_b"/>'
)


@pytest.mark.parametrize(
    ("rank_files", "why"),
    [
        # what a rank killed by SIGINT in a world test wrote before: only the finished tests
        ([case("test_a"), case("test_a")], None),
        # ... or nothing at all (tests="0"): never "0 tests, passed"
        (["", ""], f"rank 0: {NO_TEST}"),
    ],
    ids=["finished-tests-only-marked", "no-test"],
)
def test_an_interrupted_in_place_run_is_incomplete_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, rank_files: list[str], why
) -> None:
    for r, cases in enumerate(rank_files):
        props = RANK_PROPS.format(r=r) + ("" if why else INTERRUPTED.format(r=r))
        junit(tmp_path / f"junit.rank{r}.xml", cases, props)
    report = merge_junit([tmp_path])
    assert not report.ok
    expected = why or (
        "rank 0 received SIGINT (Ctrl-C, or the launcher passing it on) while t.py::test_b ran"
    )
    assert report.incomplete[0] == expected
    assert main(monkeypatch, "merge-junit", str(tmp_path)) == 1
    out = capsys.readouterr().out
    assert f"rankgate merge-junit: INCOMPLETE: {expected} (and 1 more); " in out
    # The report on the same files says INCOMPLETE, exit 1, whatever the tests say.
    files = [str(tmp_path / f"junit.rank{r}.xml") for r in (0, 1)]
    assert main(monkeypatch, "report", *files, "--out", str(tmp_path / "out")) == 1
    assert capsys.readouterr().out.startswith("rankgate report: INCOMPLETE: ")


def test_a_selection_that_ran_no_test_is_incomplete_and_says_so(tmp_path, monkeypatch, capsys):
    # What pytest writes for -m nosuchmarker (exit 5), byte for byte, on rank 0 in place.
    (tmp_path / "junit.rank0.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite '
        'name="pytest" errors="0" failures="0" skipped="0" tests="0" time="0.018" '
        'timestamp="2026-11-27T22:45:25.530894+00:00" hostname="vm" /></testsuites>'
    )
    assert main(monkeypatch, "merge-junit", str(tmp_path)) == 1
    assert capsys.readouterr().out.startswith(
        "rankgate merge-junit: INCOMPLETE: rank 0: it holds no test: its selection ran none, "
        "or the run ended before any test did; 0 tests on rank 0 of world 1"
    )


def test_pytests_nameless_testcase_of_a_pool_run_cut_short_is_never_a_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    # pytest's JUnit after SIGTERM or Ctrl-C in the middle of a test: the finished tests,
    # and a <testcase/> with no name (the set-up's duration of the test that never ended).
    path = junit(tmp_path / "junit.xml", case("test_a") + '<testcase time="0.002" />')
    read = read_junit(path)
    assert [c.name for c in read.cases] == ["test_a"]
    assert read.interrupted.startswith("a test started and never ended")
    assert main(monkeypatch, "report", str(path), "--out", str(tmp_path / "out")) == 1
    out = capsys.readouterr().out
    assert out.startswith("rankgate report: INCOMPLETE: 1 test: 1 passed")
    summary = json.loads((tmp_path / "out" / "report.json").read_text())
    assert summary["verdict"] == "incomplete" and summary["ok"] is False
    assert summary["incomplete"]["stopped"] == [
        f"{path}: a test started and never ended (its <testcase/> has no name): the run was "
        "stopped"
    ]


def test_command_names_tests_by_pytest_node_id_and_counts_one_test_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In place each rank records the node id: JUnit's classname mangles the path into
    # dots (src.test.utils_test), which cannot be pasted back into pytest.
    nodeid = "src/test/utils_test.py::TestBroadcast::test_object[backend=GLOO]"
    prop = f'<properties><property name="rankgate.nodeid" value="{nodeid}"/></properties>'
    classname = "src.test.utils_test.TestBroadcast"
    name = "test_object[backend=GLOO]"
    junit(tmp_path / "junit.rank0.xml", case(name, prop, classname=classname))
    junit(tmp_path / "junit.rank1.xml", case(name, prop + '<failure message="boom"/>', classname))
    assert main(monkeypatch, "merge-junit", str(tmp_path)) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"FAILED {nodeid}: rank 1 failed; rank 0 passed",
        "rankgate merge-junit: 1 test on ranks 0, 1 of world 2: "
        "0 passed, 1 failed, 0 error, 0 skipped, 0 xfailed, 0 xpassed, 0 not run",
    ]


def test_a_file_without_node_ids_keeps_the_junit_names(tmp_path: Path) -> None:
    junit(tmp_path / "junit.rank0.xml", case("test_a", '<failure message="boom"/>'))
    (test,) = merge_junit([tmp_path / "junit.rank0.xml"]).tests
    assert test.node_id == test.test_id == "t::test_a"


def test_ranks_ledgers_name_the_first_divergence(tmp_path: Path) -> None:
    from rankgate.harness.rankfiles import append_ledger, ledger_path

    source = tmp_path / "test_x.py"
    source.write_text("def test_x(rank):\n    if rank == 0:\n        all_reduce()\n    barrier()\n")
    failure = '<failure message="rank 0 hung (did not finish)">stacks</failure>'
    paths = [
        junit(tmp_path / "junit.rank0.xml", case("test_x", failure)),
        junit(tmp_path / "junit.rank1.xml", case("test_x", failure)),
    ]

    def entry(op: str, line: int, arg: str = "") -> dict:
        return {"group": "world", "ranks": [0, 1], "seq": 1, "op": op, "arg": arg,
                "file": str(source), "line": line, "state": "issued"}  # fmt: skip

    append_ledger(
        ledger_path(paths[0]), "t", "test_x", [entry("all_reduce", 3, "float32[4]")]
    )
    append_ledger(ledger_path(paths[1]), "t", "test_x", [entry("barrier", 4)])
    (test,) = merge_junit(paths).tests
    assert test.message == (
        "ranks 0, 1 hung; likely cause: rank 1 never issued all_reduce #1 (float32[4]) that "
        "rank 0 issued at test_x.py:3; rank 1 issued barrier #1 at test_x.py:4 instead"
    )
    assert test.details.startswith("Collectives issued around the divergence:")


def test_ranks_that_passed_with_diverging_ledgers_fail_and_the_odd_one_is_diverged(
    tmp_path: Path,
) -> None:
    from rankgate.harness.rankfiles import append_ledger, ledger_path

    paths = [junit(tmp_path / f"junit.rank{r}.xml", case("test_x", "")) for r in range(3)]
    for r, path in enumerate(paths):
        entry = {"group": "world", "ranks": [0, 1, 2], "seq": 1, "op": "all_reduce",
                 "arg": "int32[4]" if r == 2 else "float32[4]", "file": "/x/test_x.py",
                 "line": 7, "state": "completed", "reduce": "SUM"}  # fmt: skip
        append_ledger(ledger_path(path), "t", "test_x", [entry])
    (test,) = merge_junit(paths).tests
    assert (test.verdict, test.message) == (
        "failed",
        "rank 2 diverged; ranks 0, 1 passed; likely cause: ranks disagree at #1: rank 2 "
        "issued int32[4] where ranks 0, 1 issued float32[4] (all_reduce #1 at test_x.py:7)",
    )
    assert test.rank_outcomes == {0: "passed", 1: "passed", 2: "diverged"}
    assert test.failing_ranks == (2,)


def test_a_rank_a_hung_ranks_cause_names_is_diverged_never_passed(tmp_path: Path) -> None:
    cause = (
        "likely cause: rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at "
        "x.py:11; rank 1's last: broadcast #1 at x.py:9"
    )
    hung = f'<failure message="rank 0 hung (did not finish); {cause}">stacks</failure>'
    paths = [
        junit(tmp_path / "junit.rank0.xml", case("test_x", hung)),
        junit(tmp_path / "junit.rank1.xml", case("test_x", "")),
    ]
    (test,) = merge_junit(paths).tests
    assert (test.verdict, test.message) == ("failed", f"rank 1 diverged; rank 0 hung; {cause}")
