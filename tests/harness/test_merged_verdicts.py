"""The merged verdict is the pool's: the same ranks' outcomes give the same verdict in the
pool, under -n, on every in-place rank, in merge-junit and in the report, and every
collected test is in the merged file once (docs/verdicts.md, "One table").

Each in-place test starts torchrun with 2 gloo ranks, for real.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from jobs import run_torchrun_pytest

# slow: starts pytest sessions and torchrun of their own
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

XFAIL_ON_ONE_RANK = """\
import pytest


@pytest.mark.world(2)
def test_xfail_imperative_rank1(rank):
    if rank == 1:
        pytest.xfail("rank 1 says xfail")


@pytest.mark.world(2)
@pytest.mark.xfail(reason="known on rank 1")
def test_xfail_marked_fails_on_rank1(rank):
    assert rank == 0
"""

DISAGREE = "ranks disagree: rank 1 xfailed; rank 0 passed"


def _folder(tmp_path: Path, source: str) -> Path:
    (tmp_path / "test_suite.py").write_text(source)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return tmp_path


WIDE = {**os.environ, "COLUMNS": "400"}
"""pytest's short summary cuts its lines to the terminal's width."""


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
           "-q", "--color=no", "-rA", *args]  # fmt: skip
    return subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=180, env=WIDE)


def _rankgate(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rankgate.cli", *args], cwd=folder, capture_output=True, text=True
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["pool", "xdist"])
def test_a_ranks_xfail_disagrees_in_the_pool(tmp_path, workers, auto_backend):
    folder = _folder(tmp_path, XFAIL_ON_ONE_RANK)
    proc = _pytest(folder, *workers, "test_suite.py")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("1 xfailed, 1 error in ")
    assert (
        "ERROR test_suite.py::test_xfail_imperative_rank1 - "
        f"ranks disagree (world 2, backend {auto_backend}): rank 1 xfailed; rank 0 passed"
    ) in proc.stdout


def test_a_ranks_xfail_disagrees_in_place_merged_and_reported(tmp_path):
    folder = _folder(tmp_path, XFAIL_ON_ONE_RANK)
    proc = run_torchrun_pytest(
        folder, "-p", "no:randomly", "-q", "--color=no", "-rA", "--junitxml=out/junit.xml",
        "test_suite.py", timeout=180, env=WIDE,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"ERROR test_suite.py::test_xfail_imperative_rank1 - {DISAGREE}" in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("1 xfailed, 1 error in ")
    merged = _rankgate(folder, "merge-junit", "out", "-o", "merged.xml")
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert merged.stdout.splitlines() == [
        f"ERROR test_suite.py::test_xfail_imperative_rank1: {DISAGREE}",
        "rankgate merge-junit: 2 tests on ranks 0, 1 of world 2: 0 passed, 0 failed, 1 error, "
        "0 skipped, 1 xfailed, 0 xpassed, 0 not run -> merged.xml",
    ]
    report = _rankgate(folder, "report", "out", "--out", "page")
    assert report.returncode == 1, report.stdout + report.stderr
    assert report.stdout.splitlines()[-1].startswith(
        "rankgate report: FAILED: 2 tests: 0 passed, 0 failed, 1 error, 0 not run, "
        "0 skipped, 1 xfailed, 0 xpassed;"
    )


PEER_EXITS = """\
import os

import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2)
def test_peer_exits_after_the_last_collective(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == 1:
        os._exit(0)
"""


def test_a_peer_that_exits_after_the_last_collective_leaves_rank_0_passed(tmp_path):
    folder = _folder(tmp_path, PEER_EXITS)
    pool = _pytest(folder, "test_suite.py")
    assert pool.returncode == 1
    assert "rank 1 crashed (exited with code 0); rank 0 passed" in pool.stdout
    proc = run_torchrun_pytest(
        folder, "-p", "no:randomly", "-q", "--color=no", "--junitxml=out/junit.xml",
        "test_suite.py", timeout=180,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    merged = _rankgate(folder, "merge-junit", "out")
    assert merged.returncode == 1, merged.stdout + merged.stderr
    lines = merged.stdout.splitlines()
    assert lines[0] == (
        "FAILED test_suite.py::test_peer_exits_after_the_last_collective: "
        "rank 1 crashed; rank 0 passed"
    )
    assert lines[-1].endswith(
        "1 test on ranks 0, 1 of world 2: 0 passed, 1 failed, 0 error, 0 skipped, 0 xfailed, "
        "0 xpassed, 0 not run"
    )


PLAIN_TESTS = """\
import pytest


@pytest.mark.world(2)
def test_world(rank):
    pass


def test_plain_one():
    pass


def test_plain_two():
    pass
"""


def test_a_plain_test_whose_only_rank_left_no_file_is_still_merged(tmp_path):
    folder = _folder(tmp_path, PLAIN_TESTS)
    proc = run_torchrun_pytest(
        folder, "-p", "no:randomly", "-q", "--color=no", "--junitxml=out/junit.xml",
        "test_suite.py", timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = folder / "out"
    ran_on_1 = {
        case.get("name") for case in ET.parse(out / "junit.rank1.xml").getroot().iter("testcase")
    } - {"test_world"}
    (lost,) = ran_on_1  # the plain test dealt to rank 1
    (out / "junit.rank1.xml").unlink()
    merged = _rankgate(folder, "merge-junit", "out", "-o", "merged.xml")
    assert merged.returncode == 1, merged.stdout + merged.stderr
    run_id = dict(
        (p.get("name"), p.get("value"))
        for p in ET.parse(out / "junit.rank0.xml").getroot().iter("property")
    )["rankgate.run_id"]
    assert (
        f"NOT RUN test_suite.py::{lost}: rank 1 not run (rank 1 left no JUnit or results "
        f"file of run {run_id})" in merged.stdout.splitlines()
    )
    names = [c.get("name") for c in ET.parse(folder / "merged.xml").getroot().iter("testcase")]
    assert sorted(names) == sorted(
        ["missing_ranks", "test_world", "test_plain_one", "test_plain_two"]
    )  # every collected test once, and the missing rank's own error


def test_a_junit_folder_no_rank_can_write_is_one_line(tmp_path):
    # A file where the folder should be: no rank can write there, root included.
    folder = _folder(tmp_path, PLAIN_TESTS)
    (folder / "blocked").write_text("")
    proc = run_torchrun_pytest(
        folder, "-q", "--color=no", "--junitxml=blocked/junit.xml", "test_suite.py", timeout=180
    )
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "INTERNALERROR" not in out
    said = [line for line in out.splitlines() if line.startswith("ERROR: rankgate: ")]
    assert said, out
    assert all(
        re.fullmatch(
            r"ERROR: rankgate: rank [01] cannot write its results beside --junitxml "
            r"blocked/junit\.xml \(File exists: blocked\); pass a --junitxml in a folder "
            r"every rank can write",
            line,
        )
        for line in said
    ), said
