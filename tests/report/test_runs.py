"""One run's per-rank files out of a folder holding several runs' (report/runs.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rankgate.report.junit import merge_junit
from rankgate.report.junitfile import ReportInputError

pytestmark = pytest.mark.unit

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<properties><property name="rank" value="{rank}"/><property name="world_size" value="2"/>
<property name="rankgate.run_id" value="{run}"/></properties>
<testcase classname="t" name="test_a" time="0.1"/>
<testcase classname="t" name="test_b" time="0.1"/>
</testsuite></testsuites>
"""


def _junit(folder: Path, rank: int, run: str, when: float) -> None:
    path = folder / f"junit.rank{rank}.xml"
    path.write_text(JUNIT.format(rank=rank, run=run))
    os.utime(path, (when, when))


def _results(folder: Path, rank: int, run: str, when: float) -> None:
    """A results file of a rank killed inside test_a."""
    records = [
        {"event": "rank", "rank": rank, "world_size": 2, "run_id": run},
        {"event": "collected", "tests": [{"classname": "t", "name": n, "nodeid": f"t.py::{n}"}
                                         for n in ("test_a", "test_b")]},
        {"event": "begin", "classname": "t", "name": "test_a"},
    ]  # fmt: skip
    path = folder / f"junit.rank{rank}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    os.utime(path, (when, when))


def test_the_newest_run_is_read_and_the_older_named(tmp_path):
    for rank in (0, 1):
        _junit(tmp_path, rank, "old", 1000)
        _results(tmp_path, rank, "new", 2000)
    merged = merge_junit([tmp_path])
    assert merged.run_id == "new"
    assert merged.verdicts == {"t::test_a": "failed", "t::test_b": "not run"}
    assert merged.other_runs == (
        f"{tmp_path} holds files of 2 runs: read run new (the newest); left out old "
        "(junit.rank0.xml, junit.rank1.xml); --run-id ID reads another"
    )
    named = merge_junit([tmp_path], run_id="old")
    assert named.verdicts == {"t::test_a": "passed", "t::test_b": "passed"}
    assert "read run old (as named); left out new (junit.rank0.jsonl, junit.rank1.jsonl)" in (
        named.other_runs
    )


def test_a_rank_that_finished_beside_one_that_was_killed(tmp_path):
    _junit(tmp_path, 0, "new", 2000)  # rank 0 wrote its JUnit file over the old one
    _junit(tmp_path, 1, "old", 1000)
    _results(tmp_path, 1, "new", 1900)
    merged = merge_junit([tmp_path])
    assert merged.sources == (
        str(tmp_path / "junit.rank0.xml"),
        str(tmp_path / "junit.rank1.jsonl"),
    )
    assert "left out old (junit.rank1.xml)" in merged.other_runs


def test_a_junit_file_stands_over_its_ranks_results_file_of_the_same_run(tmp_path):
    for rank in (0, 1):
        _results(tmp_path, rank, "one", 1000)
        _junit(tmp_path, rank, "one", 1001)  # killed between writing one and removing the other
    merged = merge_junit([tmp_path])
    assert (merged.verdicts, merged.other_runs) == (
        {"t::test_a": "passed", "t::test_b": "passed"}, "",
    )  # fmt: skip


def test_an_unknown_run_id_is_one_line_naming_the_runs_there(tmp_path):
    _junit(tmp_path, 0, "a", 1000)
    _junit(tmp_path, 1, "a", 1000)
    with pytest.raises(ReportInputError) as error:
        merge_junit([tmp_path], run_id="b")
    assert str(error.value) == (
        f"no file of run 'b' in {tmp_path}; runs there: a (pass one of them to --run-id, "
        "or leave it out to read the newest)"
    )


def test_a_killed_runs_results_files_make_it_incomplete_with_the_crashed_test_failed(tmp_path):
    """A rank that left its results file (no JUnit file of its run) did not finish: the
    run is INCOMPLETE, as a signal-stopped one is, never FAILED alone; the test it died in
    still counts as failed, and the tests after it as not run."""
    from rankgate.report.collect import collect

    for rank in (0, 1):
        _junit(tmp_path, rank, "old", 1000)
        _results(tmp_path, rank, "new", 2000)
    merged = merge_junit([tmp_path])
    assert merged.counts["failed"] == 1 and merged.counts["not run"] == 1
    assert not merged.ok
    assert merged.interrupted_tests == ("t::test_a",)
    why = (
        "rank 0 ended inside t::test_a and wrote no JUnit file (killed, os._exit or the OOM "
        "killer): its run did not finish (junit.rank0.jsonl)"
    )
    assert merged.summary_line() == (
        f"INCOMPLETE: {why} (and 1 more); 2 tests on ranks 0, 1 of world 2: 0 passed, "
        "1 failed, 0 error, 0 skipped, 0 xfailed, 0 xpassed, 1 not run"
    )
    data = collect(tmp_path / "out", junit=[tmp_path])
    assert data.verdict == "incomplete"
    assert (data.summary["totals"]["failed"], data.summary["totals"]["not run"]) == (1, 1)
    # merge-junit's file says the same to a report read from it.
    merged.write_xml(tmp_path / "merged.xml")
    again = collect(tmp_path / "out2", junit=[tmp_path / "merged.xml"])
    assert again.verdict == "incomplete"
    assert again.summary["totals"]["failed"] == 1


def test_the_page_and_summary_say_which_run_was_read_and_what_was_left_out(tmp_path):
    """The line `rankgate report` prints about other runs' files is in report.html and
    summary.md too: a reader of the page alone knows the folder held another run."""
    from rankgate.report.collect import collect
    from rankgate.report.html import render_html
    from rankgate.report.markdown import render_markdown

    folder = tmp_path / "junit"
    folder.mkdir()
    for rank in (0, 1):
        _junit(folder, rank, "old", 1000)
        _junit(folder, rank, "new", 2000)
        (folder / f"junit.rank{rank}.xml").rename(folder / f"junit.new.rank{rank}.xml")
        _junit(folder, rank, "old", 1000)
    data = collect(tmp_path / "out", junit=[folder])
    note = (
        f"{folder} holds files of 2 runs: read run new (the newest); left out old "
        "(junit.rank0.xml, junit.rank1.xml); --run-id ID reads another"
    )
    assert data.summary["other_runs"] == [note]
    assert f"**Other runs**: {note}." in render_markdown(data).splitlines()
    assert f"<li>{note}</li>" in render_html(data)
