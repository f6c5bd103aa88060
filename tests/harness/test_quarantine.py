"""The quarantine list (``--rankgate-quarantine``): listed tests run, their failures do not
fail the run, the terminal, JUnit and report list them, and a test that passes
``passes_to_leave`` times in a row is named ready to leave the list."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from jobs import run_torchrun_pytest

from rankgate.harness.quarantine import FAILURE_PROPERTY, QUARANTINE_PROPERTY, STALE_PROPERTY
from rankgate.report.json_summary import summarize
from rankgate.report.junit import merge_junit

pytestmark = pytest.mark.dist

SOURCE = """
import pytest

@pytest.mark.world(2)
def test_always(rank):
    assert rank == 0, f"rank {rank} always fails"

@pytest.mark.world(2)
def test_fine(rank):
    pass

@pytest.mark.parametrize("x", [1, 2])
def test_plain(x):
    assert x == 1

def test_not_listed():
    pass
"""

LIST = """
passes_to_leave = 2

[[test]]
id = "test_inner.py::test_always"
reason = "rank 1 disagrees"
issue = "https://example.org/issues/1"

[[test]]
id = "test_inner.py::test_fine"
reason = "was flaky"
issue = "https://example.org/issues/2"

[[test]]
id = "test_inner.py::test_plain"
reason = "one case fails"
issue = "https://example.org/issues/3"
"""


def _listed(pytester, text: str = LIST) -> str:
    path = pytester.path / "quarantine.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_quarantined_failures_do_not_fail_the_run_and_every_one_is_listed(inner, pytester):
    listed = _listed(pytester)
    result, cases = inner.junit("--rankgate-quarantine", listed, source=SOURCE)
    assert result.ret == 0
    assert result.parseoutcomes() == {"passed": 1, "quarantined": 4}
    result.stdout.fnmatch_lines_random(
        [
            "QUARANTINED test_inner.py::test_always: failed; passes in a row 0 of 2 — rank 1 "
            "disagrees (https://example.org/issues/1)",
            "QUARANTINED test_inner.py::test_fine: passed; passes in a row 1 of 2 — was flaky "
            "(https://example.org/issues/2)",
            "QUARANTINED test_inner.py::test_plain?1?: passed; passes in a row 1 of 2 *",
            "QUARANTINED test_inner.py::test_plain?2?: failed; passes in a row 0 of 2 *",
        ]
    )
    # The failure's own text stays in the JUnit file (its xfail element has none).
    props = inner.properties(cases["test_always"])
    assert "AssertionError: rank 1 always fails" in props[FAILURE_PROPERTY]
    assert FAILURE_PROPERTY not in inner.properties(cases["test_fine"])
    assert json.loads(props[QUARANTINE_PROPERTY]) == {
        "reason": "rank 1 disagrees", "issue": "https://example.org/issues/1",
        "streak": 0, "needed": 2,
    }  # fmt: skip
    assert QUARANTINE_PROPERTY not in inner.properties(cases["test_not_listed"])
    history = json.loads((pytester.path / "quarantine.history.json").read_text())
    assert history["tests"] == {
        "test_inner.py::test_always": 0, "test_inner.py::test_fine": 1,
        "test_inner.py::test_plain[1]": 1, "test_inner.py::test_plain[2]": 0,
    }  # fmt: skip

    summary = summarize([pytester.path / "junit.xml"])
    assert summary["ok"] is True and summary["failing"] == []
    by_id = {t["id"]: t for t in summary["quarantined"]}
    assert by_id["test_inner::test_always"]["message"] == "AssertionError: rank 1 always fails"
    assert {k: (t["outcome"], t["streak"]) for k, t in by_id.items()} == {
        "test_inner::test_always": ("failed", "0 of 2"),
        "test_inner::test_fine": ("passed", "1 of 2"),
        "test_inner::test_plain[1]": ("passed", "1 of 2"),
        "test_inner::test_plain[2]": ("failed", "0 of 2"),
    }

    # A second run: test_fine passes its second time in a row and may leave the list.
    result, _ = inner.junit("--rankgate-quarantine", listed, "-k", "fine", source=SOURCE)
    result.stdout.fnmatch_lines(
        [
            "READY TO LEAVE test_inner.py::test_fine: passed; passes in a row 2 of 2: ready "
            "to leave the list — was flaky (https://example.org/issues/2)"
        ]
    )
    summary = summarize([pytester.path / "junit.xml"])
    assert [(t["id"], t["ready"]) for t in summary["quarantined"]] == [
        ("test_inner::test_fine", True)
    ]
    history = json.loads((pytester.path / "quarantine.history.json").read_text())
    assert history["tests"]["test_inner.py::test_fine"] == 2
    assert history["tests"]["test_inner.py::test_always"] == 0  # not run: kept


def test_the_ini_option_names_the_file_relative_to_the_ini(inner, pytester):
    _listed(pytester)
    result = inner(SOURCE, "-k", "always", ini="rankgate_quarantine = quarantine.toml")
    assert result.ret == 0
    assert result.parseoutcomes() == {"quarantined": 1, "deselected": 4}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[[test]]\nid = 'a::b'\nreason = 'x'\n",
            "[[test]] number 1 has no issue (a link to the issue that tracks it)",
        ),
        ("[[test]]\nid = 'a::b'\nissue = 'x'\n", "[[test]] number 1 has no reason"),
        ("[[test]\n", "not valid TOML"),
        ("passes_to_leave = 0\n", "passes_to_leave = 0 must be a whole number ≥ 1"),
        ("tests = []\n", "unknown key(s) ['tests']; it takes passes_to_leave, history"),
        (
            "[[test]]\nid='a'\nreason='r'\nissue='i'\n[[test]]\nid='a'\nreason='r'\nissue='i'\n",
            "test 'a' is listed twice",
        ),
    ],
)
def test_a_bad_quarantine_file_is_a_usage_error_naming_the_problem(inner, pytester, text, message):
    listed = _listed(pytester, text)
    result = inner("def test_x():\n    pass\n", "--rankgate-quarantine", listed)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: quarantine file {listed}: {message}" in result.stderr.str()


def test_a_missing_quarantine_file_is_a_usage_error(inner, pytester):
    result = inner("def test_x():\n    pass\n", "--rankgate-quarantine", "nowhere.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: quarantine file nowhere.toml: no such file"])


def test_an_entry_that_matches_no_test_is_a_warning_naming_it_and_the_file(inner, pytester):
    listed = _listed(pytester, LIST + STALE)
    result, _ = inner.junit("--rankgate-quarantine", listed, "-k", "not_listed", source=SOURCE)
    assert result.ret == 0  # a warning: the run's verdict stands
    result.stdout.fnmatch_lines(
        [
            f"rankgate: WARNING: quarantine entry 'test_inner.py::test_renamed' in {listed} "
            "matches no test (test_inner.py defines no test_renamed): remove it from the "
            "list, or correct its id"
        ]
    )
    # The listed tests this run deselected (-k) are no stale entries.
    assert "test_inner.py::test_always' in" not in result.stdout.str()


STALE = """
[[test]]
id = "test_inner.py::test_renamed"
reason = "was renamed"
issue = "https://example.org/issues/4"
"""


def _report_of(junit: Path, out: Path) -> tuple[dict, str, str]:
    """The report (JSON, summary.md, report.html) `rankgate report` writes for ``junit``."""
    from rankgate.report.collect import collect
    from rankgate.report.report_command import write

    write(collect(out, junit=[junit]), out)
    return (
        json.loads((out / "report.json").read_text()),
        (out / "summary.md").read_text(),
        (out / "report.html").read_text(),
    )


def _assert_reported_once(junit: Path, out: Path, listed: str) -> None:
    why = "test_inner.py defines no test_renamed"
    summary, md, html = _report_of(junit, out)
    assert summary["quarantine_stale"] == [
        {"entry": "test_inner.py::test_renamed", "list": listed, "why": why}
    ]
    assert "### Stale quarantine entries (1): they match no test" in md
    assert f"| `test_inner.py::test_renamed` | `{listed}` | {why} |" in md
    assert "<h2>Stale quarantine entries (1)</h2>" in html
    assert (
        f'<tr><td class="id">test_inner.py::test_renamed</td><td>{listed}</td><td>{why}</td></tr>'
    ) in html


@pytest.mark.parametrize("xdist", [False, True], ids=["pool", "xdist"])
def test_an_entry_that_matches_no_test_is_listed_in_the_report(inner, pytester, xdist):
    """Not only a terminal warning: the run's JUnit file carries it (written once, by the
    process that reports), and report.html and summary.md list the entry and its file."""
    listed = _listed(pytester, LIST + STALE)
    workers = ("-n", "2") if xdist else ()
    result = inner(
        SOURCE, "--junitxml=junit.xml", "--rankgate-quarantine", listed, "-k", "not_listed",
        *workers, subprocess=xdist,
    )  # fmt: skip
    assert result.ret == 0
    root = ET.parse(pytester.path / "junit.xml").getroot()
    said = [p.get("value") for p in root.iter("property") if p.get("name") == STALE_PROPERTY]
    assert len(said) == 1  # the controller's, never one per xdist worker
    _assert_reported_once(pytester.path / "junit.xml", pytester.path / "out", listed)


@pytest.mark.torch_dist
@pytest.mark.slow  # starts torchrun, and pytest on every rank
def test_in_place_rank_0_records_an_entry_that_matches_no_test_once(pytester):
    listed = _listed(pytester, LIST + STALE)
    pytester.makepyfile(test_inner=textwrap.dedent(SOURCE))
    pytester.makeini("[pytest]\n")
    done = run_torchrun_pytest(
        pytester.path, "-q", "--junitxml=out/junit.xml", "--rankgate-quarantine", listed,
        "-k", "not_listed", "test_inner.py", timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for rank, count in ((0, 1), (1, 0)):
        root = ET.parse(pytester.path / "out" / f"junit.rank{rank}.xml").getroot()
        names = [p.get("name") for p in root.iter("property")]
        assert names.count(STALE_PROPERTY) == count
    merged = pytester.path / "merged.xml"
    merge_junit([pytester.path / "out"]).write_xml(merged)
    # From the folder of per-rank files and from merge-junit's file alike.
    _assert_reported_once(pytester.path / "out", pytester.path / "page", listed)
    _assert_reported_once(merged, pytester.path / "page-merged", listed)
