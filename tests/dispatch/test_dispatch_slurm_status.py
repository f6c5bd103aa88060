"""Polling a job that left slurmctld's memory: the sacct fallback, line by line.

The local SLURM runs without accounting, so these put stand-in ``squeue``,
``scontrol`` and ``sacct`` programs first on PATH and drive the real
:class:`~rankgate.dispatch.command.Shell` through them, as a site with accounting
would answer once a job is purged (squeue empty, scontrol "Invalid job id").
"""

from __future__ import annotations

import os

import pytest

from rankgate.dispatch.outcome import Outcome
from rankgate.dispatch.profile import profile_from_dict
from rankgate.dispatch.slurm import SlurmTarget

pytestmark = pytest.mark.unit


@pytest.fixture
def purged_job(tmp_path, monkeypatch):
    """Install the stand-ins; returns a function setting what sacct prints (and exits)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    programs = {
        "squeue": "exit 0",
        "scontrol": 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1',
        "sacct": f'cat {tmp_path}/sacct.out; exit "$(cat {tmp_path}/sacct.rc)"',
    }
    for name, body in programs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def answer(stdout: str, rc: int = 0) -> SlurmTarget:
        (tmp_path / "sacct.out").write_text(stdout)
        (tmp_path / "sacct.rc").write_text(str(rc))
        return SlurmTarget(profile_from_dict({}, name="p"))

    return answer


@pytest.mark.parametrize(
    ("line", "outcome", "state", "reason", "exit_code", "where"),
    [
        (
            "NODE_FAIL|0:0|NodeDown|node[1-2]",
            Outcome.NODE_FAIL,
            "NODE_FAIL",
            "NodeDown",
            "0:0",
            "node[1-2]",
        ),
        ("COMPLETED|0:0|None|n1", Outcome.COMPLETED, "COMPLETED", "None", "0:0", "n1"),
        ("FAILED|1:0|NonZeroExitCode|n1", Outcome.FAILED, "FAILED", "NonZeroExitCode", "1:0", "n1"),
        (
            "CANCELLED by 1000|0:15|None|n1",
            Outcome.CANCELLED,
            "CANCELLED by 1000",
            "None",
            "0:15",
            "n1",
        ),
        (
            "OUT_OF_MEMORY|0:125|OutOfMemory|n3",
            Outcome.OUT_OF_MEMORY,
            "OUT_OF_MEMORY",
            "OutOfMemory",
            "0:125",
            "n3",
        ),
        ("TIMEOUT|0:0|TimeLimit|n1", Outcome.TIMEOUT, "TIMEOUT", "TimeLimit", "0:0", "n1"),
        ("PREEMPTED|0:0|None|n1", Outcome.PREEMPTED, "PREEMPTED", "None", "0:0", "n1"),
        ("BOOT_FAIL|0:0|None|", Outcome.NODE_FAIL, "BOOT_FAIL", "None", "0:0", ""),
        ("SPECIAL_EXIT|0:0", Outcome.OTHER, "SPECIAL_EXIT", "", "0:0", ""),
    ],
)
def test_purged_job_is_read_from_accounting(
    purged_job, line, outcome, state, reason, exit_code, where
):
    seen = purged_job(line + "\n").status("4242")
    assert (seen.status, seen.state, seen.reason, seen.exit_code, seen.where) == (
        outcome,
        state,
        reason,
        exit_code,
        where,
    )


def test_only_the_first_line_counts(purged_job):
    seen = purged_job("NODE_FAIL|0:0|NodeDown|n1\nCOMPLETED|0:0|None|n1\n").status("7")
    assert seen.status is Outcome.NODE_FAIL


@pytest.mark.parametrize(
    ("stdout", "rc"),
    [("", 0), ("sacct: error: Slurm accounting storage is disabled\n", 1)],
    ids=["unknown-to-accounting", "accounting-off"],
)
def test_without_accounting_the_job_is_lost(purged_job, stdout, rc):
    seen = purged_job(stdout, rc).status("7")
    assert seen.status is Outcome.LOST
    assert seen.reason == "job is in neither squeue, scontrol nor sacct"
