"""Reruns in place (``--rankgate-reruns`` under torchrun): every rank reruns a failed test
together, on a new process group, and each rank's JUnit file, merge-junit and the report
say what happened to every attempt."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from jobs import run_torchrun_pytest

from rankgate.report.json_summary import summarize
from rankgate.report.junit import merge_junit

# slow: each test starts torchrun, and pytest on every rank
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

# In place each rank is its own pytest: tmp_path is the test's one directory on every rank,
# kept for every attempt, so the counter survives the rerun; each attempt leaves a mark
# beside the test file (the run removes tmp_path at its end).
PLANTED = """
import os, pathlib
import pytest
import torch
import torch.distributed as dist

def _attempt(tmp_path, rank):
    counter = tmp_path / f"attempts-rank{rank}"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    return n

@pytest.mark.world(2)
def test_flaky(rank, tmp_path):
    n = _attempt(tmp_path, rank)
    t = torch.ones(1)
    dist.all_reduce(t)  # the group of each attempt works
    assert t.item() == 2
    (pathlib.Path(__file__).parent / f"ran-rank{rank}-attempt{n}").write_text("")
    assert not (rank == 1 and n == 1), "rank 1 fails its first attempt"

@pytest.mark.world(2)
def test_always(rank):
    assert rank == 0, f"rank {rank} always fails"

@pytest.mark.world(2)
def test_dies_on_rank_1(rank):
    if rank == 1:
        os._exit(3)
"""


def _torchrun(tmp_path: Path, *args: str, ranks: int = 2) -> subprocess.CompletedProcess:
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(PLANTED))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return run_torchrun_pytest(tmp_path, "-q", *args, ranks=ranks, timeout=180)


def _merged(tmp_path: Path) -> dict:
    report = merge_junit([tmp_path / "out"])
    return {t.name: t for t in report.tests}


def test_torchrun_flaky_passes_marked_flaky_and_always_failing_fails_with_every_attempt(
    tmp_path, auto_backend
):
    proc = _torchrun(
        tmp_path, "--rankgate-reruns", "2", "--junitxml=out/junit.xml", "-k", "flaky or always"
    )
    out = proc.stdout
    assert proc.returncode != 0, out
    assert "1 failed, 1 deselected, 1 flaky" in out
    assert (
        "FLAKY test_suite.py::test_flaky\n"
        f"    attempt 1 failed: rank 1 failed; rank 0 passed (world 2, backend {auto_backend})\n"
        "    attempt 2 passed\n"
    ) in out
    assert (
        "FAILED test_suite.py::test_always\n"
        + "".join(
            f"    attempt {n} failed: rank 1 failed; rank 0 passed (world 2, backend {auto_backend})\n"
            for n in (1, 2, 3)
        )
    ) in out
    # Rank 0 passed test_always: its terminal still shows every attempt's failure.
    assert "rankgate: every attempt" in out
    assert out.count("AssertionError: rank 1 always fails") >= 3

    merged = _merged(tmp_path)
    flaky, always = merged["test_flaky"], merged["test_always"]
    assert (flaky.verdict, flaky.flaky) == ("passed", "pass")
    assert [(a.verdict, a.ranks) for a in flaky.attempts] == [
        ("failed", {0: "passed", 1: "failed"}),
        ("passed", {0: "passed", 1: "passed"}),
    ]
    assert "rank 1 fails its first attempt" in flaky.attempts[0].errors[1]
    assert (always.verdict, always.flaky, always.failing_ranks) == ("failed", "", (1,))
    assert [a.verdict for a in always.attempts] == ["failed"] * 3
    # Both ranks ran both attempts (an all_reduce each), counting them in the one tmp_path.
    ran = sorted(p.name for p in tmp_path.glob("ran-rank*-attempt*"))
    assert ran == [
        "ran-rank0-attempt1", "ran-rank0-attempt2", "ran-rank1-attempt1", "ran-rank1-attempt2",
    ]  # fmt: skip

    merge = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "merge-junit", "out", "-o", "merged.xml"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert merge.returncode == 1, merge.stderr
    assert "FLAKY test_suite.py::test_flaky: attempt 1 failed, attempt 2 passed" in merge.stdout
    assert "; 1 flaky (failed, then passed a rerun)" in merge.stdout

    summary = summarize([tmp_path / "out"])
    assert [(t["id"], t["outcome"], t["policy"]) for t in summary["flaky"]] == [
        ("test_suite::test_flaky", "passed", "pass")
    ]
    assert [t["id"] for t in summarize([tmp_path / "merged.xml"])["flaky"]] == [
        "test_suite::test_flaky"
    ]


def test_torchrun_flaky_fail_policy_fails_it_on_every_rank(tmp_path):
    proc = _torchrun(
        tmp_path, "--rankgate-reruns", "1", "--rankgate-flaky=fail",
        "--junitxml=out/junit.xml", "-k", "flaky",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout
    assert "1 failed, 2 deselected" in proc.stdout
    assert "FAILED test_suite.py::test_flaky - flaky: attempt 1 failed, attempt 2 passed" in (
        proc.stdout
    )
    flaky = _merged(tmp_path)["test_flaky"]
    assert (flaky.verdict, flaky.flaky, flaky.failing_ranks) == ("failed", "fail", (0, 1))


def test_torchrun_a_dead_peer_is_not_rerun_and_the_record_says_why(tmp_path):
    proc = _torchrun(tmp_path, "--rankgate-reruns", "2", "--junitxml=out/junit.xml", "-k", "dies")
    assert proc.returncode != 0
    note = "not rerun: in place a hung or dead rank can only exit"
    assert note in proc.stdout
    assert "tests run more than once" not in proc.stdout
    dead = _merged(tmp_path)["test_dies_on_rank_1"]
    assert dead.verdict == "failed" and not dead.attempts
    assert note in dead.results[0].text


def test_torchrun_quarantined_failure_does_not_fail_the_run(tmp_path):
    (tmp_path / "quarantine.toml").write_text(
        '[[test]]\nid = "test_suite.py::test_always"\nreason = "rank 1 disagrees"\n'
        'issue = "https://example.org/issues/1"\n'
    )
    proc = _torchrun(
        tmp_path, "--rankgate-quarantine", "quarantine.toml", "--junitxml=out/junit.xml",
        "-k", "always",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout
    assert "2 deselected, 1 quarantined" in proc.stdout
    assert (
        "QUARANTINED test_suite.py::test_always: failed; passes in a row 0 of 5 — rank 1 "
        "disagrees (https://example.org/issues/1)"
    ) in proc.stdout
    assert _merged(tmp_path)["test_always"].verdict == "xfailed"
    (entry,) = summarize([tmp_path / "out"])["quarantined"]
    assert (entry["outcome"], entry["message"]) == ("failed", "AssertionError: rank 1 always fails")
    history = (tmp_path / "quarantine.history.json").read_text()
    assert '"test_suite.py::test_always": 0' in history


def test_torchrun_at_4_ranks_reruns_each_world_2_test_in_its_sub_world(tmp_path):
    # test_flaky runs on ranks 0, 1 and test_always on ranks 2, 3, at the same time; each
    # sub-world reruns its own test on a new group of its own.
    proc = _torchrun(
        tmp_path, "--rankgate-reruns", "2", "--junitxml=out/junit.xml", "-k", "flaky or always",
        ranks=4,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    merged = _merged(tmp_path)
    flaky, always = merged["test_flaky"], merged["test_always"]
    assert (flaky.verdict, flaky.flaky) == ("passed", "pass")
    assert [(a.verdict, a.ranks) for a in flaky.attempts] == [
        ("failed", {0: "passed", 1: "failed"}),
        ("passed", {0: "passed", 1: "passed"}),
    ]
    assert (always.verdict, always.flaky, always.failing_ranks) == ("failed", "", (3,))
    assert [(a.verdict, a.ranks) for a in always.attempts] == [
        ("failed", {2: "passed", 3: "failed"})
    ] * 3
    assert "rank 3 failed; rank 2 passed" in always.message, always.message
    ran = sorted(p.name for p in tmp_path.glob("ran-rank*-attempt*"))
    assert ran == [
        "ran-rank0-attempt1", "ran-rank0-attempt2", "ran-rank1-attempt1", "ran-rank1-attempt2",
    ]  # fmt: skip


def test_torchrun_at_4_ranks_rank_0_keeps_the_history_of_quarantined_tests_it_did_not_run(
    tmp_path,
):
    (tmp_path / "quarantine.toml").write_text(
        '[[test]]\nid = "test_suite.py::test_always"\nreason = "rank 1 disagrees"\n'
        'issue = "https://example.org/issues/1"\n'
        '[[test]]\nid = "test_suite.py::test_flaky"\nreason = "flaky"\n'
        'issue = "https://example.org/issues/2"\n'
    )
    proc = _torchrun(
        tmp_path, "--rankgate-quarantine", "quarantine.toml", "--junitxml=out/junit.xml",
        "-k", "flaky or always", ranks=4,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    # test_always ran on ranks 2 and 3 only: rank 0 still lists it and counts its history
    assert (
        "QUARANTINED test_suite.py::test_always: failed; passes in a row 0 of 5 — rank 1 "
        "disagrees (https://example.org/issues/1)"
    ) in proc.stdout
    merged = _merged(tmp_path)
    assert merged["test_always"].verdict == merged["test_flaky"].verdict == "xfailed"
    history = (tmp_path / "quarantine.history.json").read_text()
    assert '"test_suite.py::test_always": 0' in history
    assert '"test_suite.py::test_flaky": 0' in history


XFAIL_ON_RANK_1 = """
import pathlib
import pytest

@pytest.mark.world(2)
def test_rank1_xfails(rank):
    (pathlib.Path(__file__).parent / f"ran-rank{rank}").open("a").write("x")
    if rank == 1:
        pytest.xfail("rank 1 says xfail")
"""


def test_torchrun_an_attempt_whose_ranks_disagree_is_judged_by_the_table_and_not_rerun(tmp_path):
    # rank 1's pytest.xfail() beside rank 0's pass: the table's "ranks disagree", an
    # error as in the pool, never a failure that reruns it (nor a pass).
    (tmp_path / "test_disagree.py").write_text(XFAIL_ON_RANK_1)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = run_torchrun_pytest(
        tmp_path, "-q", "--rankgate-reruns", "2", "--junitxml=out/junit.xml", timeout=180
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    # (the short summary's line is cut at the terminal's width)
    assert "ERROR test_disagree.py::test_rank1_xfails - ranks disagree: rank 1 xfailed" in (
        proc.stdout
    )
    assert "\n1 error in " in proc.stdout
    assert "tests run more than once" not in proc.stdout
    # each rank ran the body once
    assert [(tmp_path / f"ran-rank{r}").read_text() for r in (0, 1)] == ["x", "x"]
    test = _merged(tmp_path)["test_rank1_xfails"]
    assert (test.verdict, test.attempts) == ("error", [])
    assert test.message.startswith("ranks disagree: rank 1 xfailed; rank 0 passed"), test.message


FLAKY_IN_THE_SECOND_SUB_WORLD = """
import pytest
import torch
import torch.distributed as dist

@pytest.mark.world(2)
def test_passes(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2

@pytest.mark.world(2)
def test_flaky(rank, tmp_path):
    counter = tmp_path / f"attempts-rank{rank}"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    t = torch.ones(1)
    dist.all_reduce(t)
    assert not (rank == 1 and n == 1), "rank 1 fails its first attempt"
"""


def test_torchrun_at_4_ranks_rank_0_names_a_flaky_test_of_another_sub_world_as_merge_junit(
    tmp_path, auto_backend_for
):
    # test_passes runs on ranks 0, 1 and test_flaky on ranks 2, 3: rank 0 ran no attempt
    # of test_flaky, and still names it with every attempt, in merge-junit's words.
    (tmp_path / "test_sub.py").write_text(FLAKY_IN_THE_SECOND_SUB_WORLD)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = run_torchrun_pytest(
        tmp_path, "-q", "--rankgate-reruns", "2", "--junitxml=out/junit.xml",
        ranks=4, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    rank0 = proc.stdout  # rank 0's terminal; the others' go to their log files
    assert "1 passed, 1 flaky in " in rank0
    assert (
        "FLAKY test_sub.py::test_flaky\n"
        # in place a sub-world has the launch's group: auto for 4 ranks (gloo on fewer GPUs)
        f"    attempt 1 failed: rank 3 failed; rank 2 passed (world 2, backend "
        f"{auto_backend_for(4)})\n"
        "    attempt 2 passed\n"
    ) in rank0
    flaky = _merged(tmp_path)["test_flaky"]
    assert (flaky.verdict, flaky.flaky) == ("passed", "pass")
    assert [(a.verdict, a.ranks) for a in flaky.attempts] == [
        ("failed", {2: "passed", 3: "failed"}),
        ("passed", {2: "passed", 3: "passed"}),
    ]
    merge = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "merge-junit", "out"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert merge.returncode == 0, merge.stdout + merge.stderr
    assert "FLAKY test_sub.py::test_flaky: attempt 1 failed, attempt 2 passed" in merge.stdout
