"""A rank's crash record: faulthandler's stacks as the rank dies, and the line read back."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rankgate.harness import crashrecord

pytestmark = pytest.mark.unit

DIES = """\
import os
from pathlib import Path
from rankgate.harness.crashrecord import CrashRecord

def test_body():
    os.abort()  # line 6

CrashRecord(Path({record!r}), rank=1, run_id="run-a").start()
test_body()
"""


def _die(tmp_path, source: str = DIES) -> crashrecord.Crash | None:
    """Run ``source`` in a process of its own, which dies writing its record."""
    record = tmp_path / "junit.rank1.crash"
    script = tmp_path / "test_dies.py"
    script.write_text(textwrap.dedent(source).format(record=str(record)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert proc.returncode < 0, proc.stderr  # killed by SIGABRT
    assert "Fatal Python error" not in proc.stderr  # the record has it, not stderr
    return crashrecord.read(record, "run-a", str(script))


def test_a_rank_that_aborts_leaves_the_line_it_died_on(tmp_path):
    crash = _die(tmp_path)
    assert crash is not None
    assert crash.error == "Fatal Python error: Aborted"
    assert crash.place == "at test_dies.py:6"
    assert crash.words == "at test_dies.py:6 (Fatal Python error: Aborted)"
    assert 'test_dies.py", line 6 in test_body' in crash.stacks


def test_another_runs_record_and_a_finished_ranks_are_not_read(tmp_path):
    _die(tmp_path)
    record = tmp_path / "junit.rank1.crash"
    assert crashrecord.read(record, "run-b") is None  # an earlier run's, left in the folder
    assert crashrecord.read(record) is not None  # any run's
    finished = crashrecord.CrashRecord(tmp_path / "junit.rank0.crash", rank=0, run_id="run-a")
    finished.start()
    assert crashrecord.read(finished.path, "run-a") is None  # a header, no fatal error
    finished.close()
    assert not finished.path.exists()
    assert crashrecord.read(tmp_path / "absent.crash") is None


def test_crash_words_name_the_recorded_line_first_then_the_ranks_without_one(tmp_path):
    crash = _die(tmp_path)
    assert crashrecord.crashed_words([1, 2, 3], {1: crash}) == (
        "rank 1 crashed at test_dies.py:6 (Fatal Python error: Aborted); ranks 2, 3 crashed "
        "(ended without a result: os._exit, a signal or the OOM killer)"
    )
    assert crashrecord.crashed_words([2], {}) == (
        "rank 2 crashed (ended without a result: os._exit, a signal or the OOM killer)"
    )


def test_the_cause_names_the_peers_collective_where_their_ledgers_show_one():
    waiting = {
        "group": "world", "seq": 2, "op": "all_reduce", "arg": "float32[4]",
        "file": "/src/test_x.py", "line": 13, "state": "waiting",
    }  # fmt: skip
    assert crashrecord.cause({1: "at test_x.py:12"}, {0: None}) == (
        "likely cause: rank 1 crashed at test_x.py:12"
    )
    assert crashrecord.cause({1: "at test_x.py:12"}, {0: [waiting], 1: None}) == (
        "likely cause: rank 1 crashed at test_x.py:12; rank 0 was in all_reduce #2 "
        "(float32[4]) issued at test_x.py:13"
    )
    assert crashrecord.cause({}, {0: [waiting]}) == ""
