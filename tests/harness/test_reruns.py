"""Reruns on a fresh pool (``--rankgate-reruns``) and the flaky policy, with planted tests:
one that fails its first attempt on one rank, one that always fails, one that hangs its
first attempt. Each run checks the terminal, the JUnit file and the report."""

from __future__ import annotations

import json

import pytest

from rankgate.harness.attempts import ATTEMPTS_PROPERTY, FLAKY_PROPERTY, decode
from rankgate.report.collect import ReportData
from rankgate.report.html import render_html
from rankgate.report.json_summary import summarize

pytestmark = pytest.mark.dist

# Each rank counts its attempts in a file of the test's tmp_path, which every attempt
# shares (the fixtures are made once, in the controller), and writes its pid per attempt
# beside the test file, where the outer test finds it.
PLANTED = """
import os, time, pathlib
import pytest

@pytest.fixture
def pids():
    return pathlib.Path(__file__).parent

def _attempt(tmp_path, rank, pids=None):
    counter = tmp_path / f"attempts-rank{rank}"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    if pids is not None:
        (pids / f"pid-rank{rank}-attempt{n}").write_text(str(os.getpid()))
    return n

@pytest.mark.world(2, backend="gloo")
def test_flaky(rank, tmp_path, pids):
    n = _attempt(tmp_path, rank, pids)
    assert not (rank == 1 and n == 1), "rank 1 fails its first attempt"

@pytest.mark.world(2, backend="gloo")
def test_always(rank):
    assert rank == 0, f"rank {rank} always fails"

@pytest.mark.world(2, backend="gloo", timeout=2)
def test_hangs_first(rank, tmp_path):
    if _attempt(tmp_path, rank) == 1 and rank == 0:
        time.sleep(60)
"""


def _attempts(case) -> list:
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    return decode(props.get(ATTEMPTS_PROPERTY, "[]"))


def test_flaky_passes_marked_flaky_and_the_always_failing_one_fails_with_every_attempt(
    inner, pytester
):
    result, cases = inner.junit(
        "--rankgate-reruns", "2", "-k", "flaky or always", "-p", "no:randomly", source=PLANTED
    )
    assert result.ret == 1
    assert result.parseoutcomes() == {"failed": 1, "flaky": 1, "deselected": 1}
    result.stdout.fnmatch_lines(
        [
            "*rankgate: tests run more than once (--rankgate-reruns)*",
            "FLAKY test_inner.py::test_flaky",
            "    attempt 1 failed: rank 1 failed; rank 0 passed (world 2, backend gloo)",
            "    attempt 2 passed",
            "FAILED test_inner.py::test_always",
            "    attempt 1 failed: rank 1 failed; rank 0 passed (world 2, backend gloo)",
            "    attempt 2 failed: rank 1 failed; rank 0 passed (world 2, backend gloo)",
            "    attempt 3 failed: rank 1 failed; rank 0 passed (world 2, backend gloo)",
        ]
    )
    # The failure keeps the first attempt's headline and every attempt's whole text.
    result.stdout.fnmatch_lines(
        ["FAILED test_inner.py::test_always - rank 1 failed; rank 0 passed (world 2, *"]
    )
    assert "failed 3 of 3 attempts" in result.stdout.str()
    assert result.stdout.str().count("AssertionError: rank 1 always fails") == 3

    flaky = inner.properties(cases["test_flaky"])
    assert flaky[FLAKY_PROPERTY] == "pass"
    first, second = _attempts(cases["test_flaky"])
    assert (first.verdict, first.ranks, list(first.errors)) == (
        "failed", {0: "passed", 1: "failed"}, [1],
    )  # fmt: skip
    assert "rank 1 fails its first attempt" in first.errors[1]
    assert (second.verdict, second.ranks, second.errors) == (
        "passed", {0: "passed", 1: "passed"}, {},
    )  # fmt: skip
    assert cases["test_flaky"].find("failure") is None

    always = cases["test_always"]
    assert always.find("failure") is not None
    assert FLAKY_PROPERTY not in inner.properties(always)
    assert [a.verdict for a in _attempts(always)] == ["failed"] * 3

    # Every attempt ran on new processes: the rank's pid differs between attempts.
    runs = list(pytester.path.glob("pid-rank1-attempt*"))
    assert len(runs) == 2, runs
    assert len({p.read_text() for p in runs}) == 2

    summary = summarize([pytester.path / "junit.xml"])
    assert summary["totals"]["passed"] == 1 and summary["totals"]["failed"] == 1
    assert [(t["id"], t["outcome"], t["policy"]) for t in summary["flaky"]] == [
        ("test_inner::test_flaky", "passed", "pass")
    ]
    assert summary["flaky"][0]["attempts"] == [
        "attempt 1 failed: rank 1 failed; rank 0 passed (world 2, backend gloo)",
        "attempt 2 passed",
    ]
    (failing,) = summary["failing"]
    assert failing["id"] == "test_inner::test_always" and len(failing["attempts"]) == 3
    page = render_html(ReportData(summary=summary))
    assert '<section id="flaky"><h2>Flaky tests (1)</h2>' in page


def test_a_hang_on_the_first_attempt_counts_as_one(inner):
    result, cases = inner.junit("--rankgate-reruns", "1", "-k", "hangs_first", source=PLANTED)
    assert result.ret == 0
    assert result.parseoutcomes() == {"flaky": 1, "deselected": 2}
    hung, passed = _attempts(cases["test_hangs_first"])
    assert (hung.verdict, hung.ranks) == ("failed", {0: "hung", 1: "passed"})
    assert "did not finish within the test's timeout of 2 s" in hung.errors[0]
    assert "test_hangs_first" in hung.errors[0]  # its stacks
    assert passed.verdict == "passed"


def test_flaky_fail_policy_fails_the_flaky_test(inner, pytester):
    result, cases = inner.junit(
        "--rankgate-reruns", "1", "--rankgate-flaky=fail", "-k", "test_flaky", source=PLANTED
    )
    assert result.ret == 1
    assert result.parseoutcomes() == {"failed": 1, "deselected": 2}
    result.stdout.fnmatch_lines(
        [
            "FLAKY (failed: --rankgate-flaky=fail) test_inner.py::test_flaky",
            "FAILED test_inner.py::test_flaky - flaky: attempt 1 failed, attempt 2 passed*",
        ]
    )
    case = cases["test_flaky"]
    assert case.find("failure").get("message") == (
        "flaky: attempt 1 failed, attempt 2 passed; fails the run (--rankgate-flaky=fail)"
    )
    assert inner.properties(case)[FLAKY_PROPERTY] == "fail"
    assert "rank 1 fails its first attempt" in case.find("failure").text  # the first failure
    summary = summarize([pytester.path / "junit.xml"])
    assert [(t["outcome"], t["policy"]) for t in summary["flaky"]] == [("failed", "fail")]


def test_without_reruns_the_planted_test_fails_once(inner):
    result, cases = inner.junit("-k", "test_flaky", source=PLANTED)
    assert result.parseoutcomes() == {"failed": 1, "deselected": 2}
    assert ATTEMPTS_PROPERTY not in inner.properties(cases["test_flaky"])
    assert "tests run more than once" not in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (["--rankgate-reruns=two"], "", "--rankgate-reruns='two' is not a whole number*"),
        (["--rankgate-reruns=-1"], "", "--rankgate-reruns must be 0 or more, got -1"),
        ([], "rankgate_reruns = x", "ini option rankgate_reruns='x' is not a whole number*"),
        (["--rankgate-flaky=maybe"], "", "--rankgate-flaky='maybe': choose pass or fail"),
        ([], "rankgate_flaky = fails", "ini option rankgate_flaky='fails': choose pass or fail"),
    ],
)
def test_bad_rerun_options_are_usage_errors(inner, args, ini, message):
    result = inner("def test_x():\n    pass\n", *args, ini=ini)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])


def test_the_attempts_property_is_json_every_tool_can_read(inner):
    _, cases = inner.junit("--rankgate-reruns", "1", "-k", "test_flaky", source=PLANTED)
    raw = inner.properties(cases["test_flaky"])[ATTEMPTS_PROPERTY]
    assert [a["verdict"] for a in json.loads(raw)] == ["failed", "passed"]
