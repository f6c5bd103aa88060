"""`rankgate report` on merge-junit's output says what it says from the per-rank folder:
every rank's traceback, output and hang stacks, the ledgers side by side, and the verdict
(INCOMPLETE for a run a signal stopped). Each test runs pytest on 2 gloo ranks under
torchrun, for real, then reports the folder and the merged file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from jobs import end_session, run_torchrun_pytest, torchrun_pytest_cmd

from rankgate.harness import divergence, ledger
from rankgate.report.collect import ReportData, collect

# slow: each test starts torchrun, and pytest on every rank
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

PYTEST_ARGS = ["-q", "--color=no", "--junitxml=out/junit.xml", "test_suite.py"]

FAILS_AND_HANGS = """
import sys
import pytest
import torch
import torch.distributed as dist

@pytest.mark.world(2)
def test_fails_on_rank_1(rank):
    print(f"out of rank {rank}")
    print(f"err of rank {rank}", file=sys.stderr)
    assert rank == 0, f"rank {rank} is broken"

@pytest.mark.world(2, timeout=5)
def test_skipped_sync(rank):
    t = torch.ones(4)
    if rank != 1:
        dist.all_reduce(t)
    dist.barrier()

def test_never_reached():
    pass
"""

SIGNALLED = """
import time
import pytest

@pytest.mark.world(2)
def test_first(rank):
    print(f"first on rank {rank}")

@pytest.mark.world(2, timeout=120)
def test_waits(rank):
    open(f"running{rank}", "w").close()
    time.sleep(100)

def test_never_reached():
    pass
"""


def _plant(tmp_path: Path, source: str) -> None:
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(source))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")


def _rankgate(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rankgate.cli", *args], cwd=cwd, capture_output=True, text=True
    )


def _merge(tmp_path: Path, expect: int) -> Path:
    merged = _rankgate(tmp_path, "merge-junit", "out", "-o", "merged.xml")
    assert merged.returncode == expect, merged.stdout + merged.stderr
    return tmp_path / "merged.xml"


def _seen(data: ReportData) -> list[tuple]:
    """What the report shows of each failed test, rank by rank."""

    def ranks(f):
        return [
            (r.rank, r.outcome, r.traceback.strip(), r.stdout.strip(), r.stderr.strip())
            for r in f.ranks
        ]

    return [
        (f.id, f.outcome, f.message, f.reproduce, f.stopped_run, divergence.table_in(f.text),
         ranks(f))
        for f in data.failures
    ]  # fmt: skip


def test_a_merged_file_reports_every_ranks_traceback_stacks_and_ledgers(tmp_path):
    _plant(tmp_path, FAILS_AND_HANGS)
    # The ledger asked for (the default, on a GPU host's cpu:gloo,cuda:nccl too), whatever
    # the caller set: the ledger table is part of what the two reports must agree on.
    run = run_torchrun_pytest(
        tmp_path, *PYTEST_ARGS, env={**os.environ, ledger.ENV: "1"}, timeout=180
    )
    assert run.returncode != 0
    merged = _merge(tmp_path, expect=1)
    folder = collect(tmp_path / "page1", [tmp_path / "out"])
    from_merged = collect(tmp_path / "page2", [merged])
    assert (folder.verdict, from_merged.verdict) == ("failed", "failed")
    assert _seen(from_merged) == _seen(folder)
    by_id = {f.id: f for f in from_merged.failures}
    failed, hung = by_id["test_suite::test_fails_on_rank_1"], by_id["test_suite::test_skipped_sync"]
    rank1 = next(r for r in failed.ranks if r.rank == 1)
    assert "AssertionError: rank 1 is broken" in rank1.traceback
    assert (rank1.stdout.splitlines()[-1], rank1.stderr.splitlines()[-1]) == (
        "out of rank 1", "err of rank 1",
    )  # fmt: skip
    assert {r.rank: r.outcome for r in hung.ranks} == {0: "hung", 1: "hung"}
    assert all("Thread" in r.traceback or "File" in r.traceback for r in hung.ranks)
    assert divergence.table_in(hung.text)  # the ledgers side by side


def test_a_merged_file_of_a_signalled_run_reads_incomplete(tmp_path):
    _plant(tmp_path, SIGNALLED)
    job = subprocess.Popen(
        torchrun_pytest_cmd(*PYTEST_ARGS), cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not all((tmp_path / f"running{r}").exists() for r in (0, 1)):
            if time.monotonic() > deadline or job.poll() is not None:
                pytest.fail(f"the ranks never reached test_waits:\n{end_session(job)}")
            time.sleep(0.1)
        job.send_signal(signal.SIGTERM)  # a CI runner's cancel
        job.wait(timeout=60)
    finally:
        end_session(job)
    merged = _merge(tmp_path, expect=1)
    from_folder = _rankgate(tmp_path, "report", "out", "--out", "page1")
    from_merged = _rankgate(tmp_path, "report", str(merged), "--out", "page2")
    assert (from_folder.returncode, from_merged.returncode) == (1, 1)
    expected = (
        "rankgate report: INCOMPLETE: 3 tests: 1 passed, 1 failed, 0 error, 1 not run, "
        "0 skipped, 0 xfailed, 0 xpassed; 0 benchmark files"
    )
    assert from_folder.stdout.split("; wrote ")[0] == expected
    assert from_merged.stdout.split("; wrote ")[0] == expected
    assert _seen(collect(tmp_path / "p2", [merged])) == _seen(
        collect(tmp_path / "p1", [tmp_path / "out"])
    )
