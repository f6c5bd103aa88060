"""In place, the verdict of a test the harness's own after-test check fails reads as the
pool's: a headline naming the rank and the cause, no frames of rankgate's hooks."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET

import pytest
from jobs import run_torchrun_pytest

from rankgate.harness import ledger
from tests.once import once_per_run

# slow: starts torchrun, and pytest on every rank
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

SUITE = """\
import subprocess

import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2)
def test_a_leaves_a_child_on_one_rank(rank):
    if rank == 1:
        subprocess.Popen(["sleep", "1000"])


@pytest.mark.world(2)
def test_b_next_is_healthy(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2


@pytest.mark.world(2)
def test_c_destroys_on_one_rank(rank):
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 1:
        dist.destroy_process_group()  # destroy
        return
    dist.all_reduce(t)  # second
"""


def at(tag: str) -> str:
    """'test_suite.py:12': where the line marked ``# tag`` is."""
    (line,) = [n for n, text in enumerate(SUITE.splitlines(), 1) if text.endswith(f"# {tag}")]
    return f"test_suite.py:{line}"


@pytest.fixture(scope="module")
def run(request, tmp_path_factory):
    """The suite under torchrun, once per run (tests/once.py): its folder and the run."""

    def launch():
        folder = tmp_path_factory.mktemp("inplace_verdicts")
        (folder / "test_suite.py").write_text(SUITE)
        (folder / "pytest.ini").write_text("[pytest]\n")
        # Asked for (the default, on a GPU host's cpu:gloo,cuda:nccl too), whatever the
        # caller set: the destroy's headline comes from the ledger.
        proc = run_torchrun_pytest(
            folder, "-p", "no:randomly", "-q", "--color=no", "--rankgate-timeout=20",
            "--junitxml=out/junit.xml", "test_suite.py", env={**os.environ, ledger.ENV: "1"},
            timeout=180,
        )  # fmt: skip
        return folder, proc

    return once_per_run(request, launch)


def _failure_messages(path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    return {
        case.get("name"): failure.get("message")
        for case in root.iter("testcase")
        for failure in case.iter("failure")
    }


def test_a_group_destroyed_on_one_rank_is_the_headline_in_place(run):
    # Before: "rank 1 never issued all_reduce #1", which rank 1 had completed. Rank 0
    # fails (the peer's socket closed) or hangs (it stayed open; the run then stops):
    # the last test, so the counts are the same either way.
    _, proc = run
    cause = (
        f"; likely cause: rank 1 destroyed the default process group at {at('destroy')}; "
        f"rank 0 was in all_reduce #2 (float32[4]) issued at {at('second')}"
    )
    (headline,) = [line for line in proc.stdout.splitlines() if line.endswith(cause)][:1]
    assert headline.startswith(("ranks 0, 1 failed;", "rank 1 failed; rank 0 hung (")), headline
    assert "never issued" not in proc.stdout


def test_a_leak_in_place_names_the_process_and_the_rank_without_rankgates_frames(run):
    folder, proc = run
    lines = proc.stdout.splitlines()
    # Before: rank 1's text was 30 lines of rankgate's pytest_runtest_call hook.
    (start,) = [n for n, line in enumerate(lines) if line.startswith("rank 1 failed; rank 0")]
    assert re.fullmatch(
        r"rank 1 failed; rank 0 passed; rank 1 left processes running: pid \d+ \(sleep 1000\)",
        lines[start],
    )
    pid = lines[start].split("pid ", 1)[1].split()[0]
    assert lines[start + 1 : start + 4] == [
        "--- rank 1: failed ---",
        f"rankgate: the test left processes running; they were ended: pid {pid} (sleep 1000). "
        "End what a test starts (Popen.terminate() and wait(), or a fixture's teardown)",
        "-" * 30 + " rankgate reproduce " + "-" * 30,
    ]
    for internal in ("AfterTestProblem", "inplace/session.py", "hookimpl"):
        assert internal not in proc.stdout
    messages = _failure_messages(folder / "out" / "junit.rank1.xml")
    assert messages["test_a_leaves_a_child_on_one_rank"].startswith(
        "rankgate: the test left processes running; they were ended: pid "
    )
    assert messages["test_c_destroys_on_one_rank"].startswith(
        "rankgate: the test destroyed the default process group"
    )
    assert "FAILED test_suite.py::test_b_next_is_healthy" not in proc.stdout
    assert "2 failed, 1 passed" in proc.stdout
