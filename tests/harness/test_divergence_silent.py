"""Ranks that issued different collectives fail the test even when every body returned,
and every report words it the same: the pool at world 2, 3 and 4, in place under
torchrun at 2, 3 and 4 ranks (rank 0's terminal, merge-junit, report.html), where a
world(k) test run in a sub-world names global ranks (issue 58, parts 3 and 5).

Each SILENT case completes on gloo without an error and checks none of its values: only
the comparison of the ranks' ledgers at the test's end (their digests, then the entries)
fails it. A mismatch names the odd rank out; two ranks that differ name neither.
"""

from __future__ import annotations

import html
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from jobs import run_torchrun_pytest

from rankgate.report.junit import merge_junit
from tests.warmstart import WARM_PYTHON

pytestmark = pytest.mark.dist

SILENT = """\
import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2, backend="gloo")
def test_reduce_op_two(rank):
    t = torch.ones(4)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if rank == 1 else dist.ReduceOp.SUM)  # op_two


@pytest.mark.world(2, backend="gloo")
def test_dtype_two(rank):
    t = torch.ones(4, dtype=torch.int32 if rank == 1 else torch.float32)
    dist.all_reduce(t)  # dtype_two


@pytest.mark.world(2, backend="gloo")
def test_correct_two(rank):
    t = torch.ones(4)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    dist.barrier()


@pytest.mark.world(3, backend="gloo")
def test_dtype_three(rank):
    t = torch.ones(4)
    dist.broadcast(t, src=0)
    t = torch.ones(4, dtype=torch.int32 if rank == 1 else torch.float32)
    dist.all_reduce(t)  # dtype_three


@pytest.mark.world(3, backend="gloo")
def test_reduce_op_three(rank):
    t = torch.ones(4)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if rank == 2 else dist.ReduceOp.SUM)  # op_three


@pytest.mark.world(3, backend="gloo")
def test_correct_three(rank):
    t = torch.ones(4)
    dist.broadcast(t, src=0)
    dist.all_reduce(t)
    dist.barrier()


@pytest.mark.world(4, backend="gloo")
def test_dtype_four(rank):
    t = torch.ones(4, dtype=torch.int32 if rank == 3 else torch.float32)
    dist.all_reduce(t)  # dtype_four
"""


def at(tag: str) -> str:
    """'test_silent.py:12': where the line marked ``# tag`` is."""
    (line,) = [n for n, text in enumerate(SILENT.splitlines(), 1) if text.endswith(f"# {tag}")]
    return f"test_silent.py:{line}"


UNDECIDED = "ranks 0, 1 diverged; the ledgers cannot tell which rank is wrong: ranks disagree at #1"

VERDICTS = {
    "test_reduce_op_two": (
        2,
        f"{UNDECIDED}: rank 0 issued ReduceOp.SUM, rank 1 issued ReduceOp.MAX "
        f"(all_reduce #1 at {at('op_two')})",
    ),
    "test_dtype_two": (
        2,
        f"{UNDECIDED}: rank 0 issued float32[4], rank 1 issued int32[4] "
        f"(all_reduce #1 at {at('dtype_two')})",
    ),
    "test_correct_two": (2, ""),
    "test_dtype_three": (
        3,
        "rank 1 diverged; ranks 0, 2 passed; likely cause: ranks disagree at #2: rank 1 issued "
        f"int32[4] where ranks 0, 2 issued float32[4] (all_reduce #2 at {at('dtype_three')})",
    ),
    "test_reduce_op_three": (
        3,
        "rank 2 diverged; ranks 0, 1 passed; likely cause: ranks disagree at #1: rank 2 issued "
        f"ReduceOp.MAX where ranks 0, 1 issued ReduceOp.SUM (all_reduce #1 at {at('op_three')})",
    ),
    "test_correct_three": (3, ""),
    "test_dtype_four": (
        4,
        "rank 3 diverged; ranks 0, 1, 2 passed; likely cause: ranks disagree at #1: rank 3 "
        f"issued int32[4] where ranks 0, 1, 2 issued float32[4] (all_reduce #1 at "
        f"{at('dtype_four')})",
    ),
}
"""Each test's world and its verdict ('' for a pass), as rank 0's ranks name them."""


def _write(folder: Path) -> None:
    (folder / "test_silent.py").write_text(SILENT)
    (folder / "pytest.ini").write_text("[pytest]\n")


def _messages(junit: Path) -> dict[str, str]:
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        failure = case.find("failure")
        found[case.get("name")] = "" if failure is None else failure.get("message", "")
    return found


def test_in_the_pool_every_mismatch_fails_and_names_the_odd_rank_out(tmp_path):
    _write(tmp_path)
    cmd = [WARM_PYTHON.executable(), "-m", "pytest", "-p", "no:cacheprovider", "-q",
           "--junitxml=j.xml"]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    expected = {
        name: f"{line} (world {world}, backend gloo)" if line else ""
        for name, (world, line) in VERDICTS.items()
    }
    assert _messages(tmp_path / "j.xml") == expected
    assert "5 failed, 2 passed" in done.stdout
    # JUnit's per-rank outcomes say the same: the odd rank out "diverged", never passed.
    (case,) = [
        c
        for c in ET.parse(tmp_path / "j.xml").iter("testcase")
        if c.get("name") == "test_dtype_three"
    ]
    said = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert [said[f"rankgate.rank{r}.outcome"] for r in range(3)] == ["passed", "diverged", "passed"]
    assert said["rankgate.failing_ranks"] == "1"


def _global(line: str, base: int) -> str:
    """``line`` of a world(2) test run in the sub-world of ranks base, base+1."""
    return (
        line.replace("ranks 0, 1", f"ranks {base}, {base + 1}")
        .replace("rank 0 ", f"rank {base} ")
        .replace("rank 1 ", f"rank {base + 1} ")
    )


@pytest.mark.torch_dist
@pytest.mark.slow  # starts torchrun and pytest on every rank
@pytest.mark.parametrize("n", [2, 3, 4])
def test_in_place_every_report_names_the_same_mismatch(tmp_path, n):
    _write(tmp_path)
    done = run_torchrun_pytest(
        tmp_path, "--color=no", "--junitxml=out/junit.xml", "test_silent.py", ranks=n, timeout=300
    )
    assert done.returncode != 0
    expected = {name: line for name, (world, line) in VERDICTS.items() if world <= n}
    if n == 4:
        # Four ranks deal the world(2) tests to the sub-worlds 0..1 and 2..3 in turn: the
        # second one runs on ranks 2, 3, and its verdict names them.
        expected["test_dtype_two"] = _global(expected["test_dtype_two"], 2)
    merged = merge_junit(sorted((tmp_path / "out").glob("junit.rank*.xml")))
    assert {t.name: t.message for t in merged.tests if t.name in expected} == expected
    for line in expected.values():
        if line and "ranks 2, 3" not in line:  # rank 0 ran it: its terminal says it
            assert line in done.stdout, done.stdout + done.stderr
    page = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "report", "out", "--out", "page"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert page.returncode == 1, page.stdout + page.stderr
    shown = html.unescape((tmp_path / "page" / "report.html").read_text())
    for line in expected.values():
        assert line in shown
