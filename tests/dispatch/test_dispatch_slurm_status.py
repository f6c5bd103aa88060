"""Asking SLURM where a job is: JSON records, the text fallback, and sacct for purged jobs.

The hpc suite drives the real SLURM 22.05 here (JSON through ``squeue --json``). These
put stand-in ``squeue``, ``scontrol`` and ``sacct`` programs first on PATH and drive the
real :class:`~rankgate.dispatch.shell.Shell` through them, for what this SLURM cannot
show: other versions' JSON, a SLURM without JSON, and a site with accounting answering
once a job is purged (squeue empty, scontrol "Invalid job id").
"""

from __future__ import annotations

import json
import os

import pytest

from rankgate.dispatch.job_outcome import JobOutcome, Phase
from rankgate.dispatch.profile import profile_from_dict
from rankgate.dispatch.shell import Shell
from rankgate.dispatch.slurm import SlurmTarget
from rankgate.dispatch.slurm_query import SlurmQuery, exit_code, observation_from_record
from rankgate.proc.command import CommandFailed

pytestmark = pytest.mark.unit


# What SLURM 22.05 (Debian 12) says to an option it lacks, and to an unknown job.
NO_JSON = (
    """case " $* " in *" --json "*) echo "$0: unrecognized option '--json'" >&2; exit 1;; esac"""
)
UNKNOWN = 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1'


def _install(bin_dir, programs: dict[str, str], monkeypatch) -> None:
    bin_dir.mkdir(exist_ok=True)
    for name, body in programs.items():
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {bin_dir}/calls\n{body}\n')
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture(params=["json", "text"])
def purged_job(request, tmp_path, monkeypatch):
    """Install the stand-ins; returns a function setting what sacct prints (and exits).

    ``json``: squeue --json answers (with no such job), as 22.05 does; ``text``: a SLURM
    without JSON, where squeue prints nothing for the job.
    """
    squeue = "echo '{\"jobs\": []}'" if request.param == "json" else f"{NO_JSON}\nexit 0"
    programs = {
        "squeue": squeue,
        "scontrol": f"{NO_JSON}\n{UNKNOWN}",
        "sacct": f'cat {tmp_path}/sacct.out; exit "$(cat {tmp_path}/sacct.rc)"',
    }
    _install(tmp_path / "bin", programs, monkeypatch)

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
            JobOutcome.NODE_FAIL,
            "NODE_FAIL",
            "NodeDown",
            "0:0",
            "node[1-2]",
        ),
        ("COMPLETED|0:0|None|n1", JobOutcome.COMPLETED, "COMPLETED", "None", "0:0", "n1"),
        (
            "FAILED|1:0|NonZeroExitCode|n1",
            JobOutcome.FAILED,
            "FAILED",
            "NonZeroExitCode",
            "1:0",
            "n1",
        ),
        (
            "CANCELLED by 1000|0:15|None|n1",
            JobOutcome.CANCELLED,
            "CANCELLED by 1000",
            "None",
            "0:15",
            "n1",
        ),
        (
            "OUT_OF_MEMORY|0:125|OutOfMemory|n3",
            JobOutcome.OUT_OF_MEMORY,
            "OUT_OF_MEMORY",
            "OutOfMemory",
            "0:125",
            "n3",
        ),
        ("TIMEOUT|0:0|TimeLimit|n1", JobOutcome.TIMEOUT, "TIMEOUT", "TimeLimit", "0:0", "n1"),
        ("PREEMPTED|0:0|None|n1", JobOutcome.PREEMPTED, "PREEMPTED", "None", "0:0", "n1"),
        ("BOOT_FAIL|0:0|None|", JobOutcome.NODE_FAIL, "BOOT_FAIL", "None", "0:0", ""),
        ("SPECIAL_EXIT|0:0", JobOutcome.OTHER, "SPECIAL_EXIT", "", "0:0", ""),
    ],
)
def test_purged_job_is_read_from_accounting(
    purged_job, line, outcome, state, reason, exit_code, where
):
    seen = purged_job(line + "\n").observe("4242")
    assert (seen.status, seen.state, seen.reason, seen.exit_code, seen.where) == (
        outcome,
        state,
        reason,
        exit_code,
        where,
    )


def test_only_the_first_line_counts(purged_job):
    seen = purged_job("NODE_FAIL|0:0|NodeDown|n1\nCOMPLETED|0:0|None|n1\n").observe("7")
    assert seen.status is JobOutcome.NODE_FAIL


@pytest.mark.parametrize(
    ("stdout", "rc"),
    [("", 0), ("sacct: error: Slurm accounting storage is disabled\n", 1)],
    ids=["unknown-to-accounting", "accounting-off"],
)
def test_without_accounting_the_job_is_lost(purged_job, stdout, rc):
    seen = purged_job(stdout, rc).observe("7")
    assert seen.status is JobOutcome.LOST
    assert seen.reason == "job is in neither squeue, scontrol nor sacct"


# --- JSON records ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (0, "0:0"),
        (256, "1:0"),  # SLURM 22.05: the raw wait status, seen for real (exit 1)
        (768, "3:0"),  # exit 3, seen for real
        (9, "0:9"),  # killed by signal 9, seen for real
        (15, "0:15"),  # scancel's SIGTERM, seen for real
        (4021, "0:53"),  # JobLaunchFailure, seen for real; scontrol printed ExitCode=0:53
        ({"status": "EXITED", "return_code": 3, "signal": {"signal_id": 0}}, "3:0"),  # 23.02
        (
            {
                "status": ["SIGNALED"],
                "return_code": {"set": True, "infinite": False, "number": 0},
                "signal": {"id": {"set": True, "infinite": False, "number": 9}, "name": "KILL"},
            },
            "0:9",
        ),  # 23.11 and later
        ({"return_code": {"set": False, "number": 0}, "signal": {}}, "0:0"),
        (None, "0:0"),
    ],
)
def test_exit_codes_read_as_scontrol_prints_them(raw, expected):
    assert exit_code(raw) == expected


# Fields of real `squeue --json` records from this machine's SLURM 22.05.8 (v0.0.38).
RECORDS_22_05 = [
    {"job_id": 48, "name": "rankgate-hpc-x", "job_state": "FAILED",
     "state_reason": "NonZeroExitCode", "exit_code": 256, "nodes": "rankgate-node"},
    {"job_id": 5, "name": "wrap", "job_state": "PENDING",
     "state_reason": "PartitionConfig", "exit_code": 0, "nodes": ""},
    {"job_id": 49, "name": "rankgate-hpc-y", "job_state": "PREEMPTED",
     "state_reason": "None", "exit_code": 15, "nodes": "rankgate-node"},
]  # fmt: skip


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (
            RECORDS_22_05[0],
            ("FAILED", JobOutcome.FAILED, "NonZeroExitCode", "1:0", "rankgate-node", False),
        ),
        (RECORDS_22_05[1], ("PENDING", Phase.QUEUED, "PartitionConfig", "", "", True)),
        (
            RECORDS_22_05[2],
            ("PREEMPTED", JobOutcome.PREEMPTED, "None", "0:15", "rankgate-node", False),
        ),
        # Later versions: job_state is a list of a base state and flags.
        (
            {"job_id": 7, "job_state": ["RUNNING"], "state_reason": "None", "nodes": "n[1-2]"},
            ("RUNNING", Phase.RUNNING, "None", "", "n[1-2]", False),
        ),
        (
            {
                "job_id": 7,
                "job_state": ["COMPLETED", "COMPLETING"],
                "exit_code": {"return_code": 0},
            },
            ("COMPLETING", Phase.RUNNING, "", "", "", False),
        ),
        (
            {"job_id": 7, "job_state": ["PENDING", "REQUEUED"], "state_reason": "BeginTime"},
            ("PENDING", Phase.QUEUED, "BeginTime", "", "", False),
        ),
    ],
)
def test_json_records_become_observations(record, expected):
    seen = observation_from_record(record)
    assert (
        seen.state,
        seen.status,
        seen.reason,
        seen.exit_code,
        seen.where,
        seen.never_starts,
    ) == expected


def _json_answer(tmp_path, records) -> str:
    (tmp_path / "jobs.json").write_text(json.dumps({"meta": {}, "errors": [], "jobs": records}))
    return f"cat {tmp_path}/jobs.json"


def test_slurm_22_05_is_asked_through_squeue_json_and_the_job_picked_out(tmp_path, monkeypatch):
    # 22.05's scontrol has no --json, and its squeue --json lists every job, whatever -j says.
    _install(
        tmp_path / "bin",
        {"scontrol": f"{NO_JSON}\nexit 9", "squeue": _json_answer(tmp_path, RECORDS_22_05)},
        monkeypatch,
    )
    query = SlurmQuery(Shell())
    assert query.look("49").status is JobOutcome.PREEMPTED
    assert query.look("48").exit_code == "1:0"
    assert query.look("1234") is None  # not among the jobs: purged (sacct's turn)
    assert query.find("rankgate-hpc-x") == "48" and query.find("nope") is None
    assert query.mode == "squeue-json"
    calls = (tmp_path / "bin" / "calls").read_text().splitlines()
    assert calls[0] == "scontrol --json show job 49"  # tried once, then never again
    assert [c for c in calls if c.startswith("scontrol")] == [calls[0]]


def test_a_slurm_with_scontrol_json_is_asked_for_the_one_job(tmp_path, monkeypatch):
    _install(
        tmp_path / "bin",
        {"scontrol": _json_answer(tmp_path, RECORDS_22_05[:1]), "squeue": "exit 9"},
        monkeypatch,
    )
    query = SlurmQuery(Shell())
    assert query.look("48").status is JobOutcome.FAILED and query.mode == "scontrol-json"


def test_without_json_it_falls_back_to_text(tmp_path, monkeypatch):
    _install(
        tmp_path / "bin",
        {
            "squeue": f"{NO_JSON}\necho 'PENDING|PartitionNodeLimit|'",
            "scontrol": f"{NO_JSON}\nexit 9",
        },
        monkeypatch,
    )
    query = SlurmQuery(Shell())
    seen = query.look("5")
    assert (seen.status, seen.reason, seen.never_starts) == (
        Phase.QUEUED,
        "PartitionNodeLimit",
        True,
    )
    assert query.mode == "text"


def test_a_controller_that_does_not_answer_is_a_failed_look_not_a_lost_job(tmp_path, monkeypatch):
    down = 'echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1'
    _install(tmp_path / "bin", {"scontrol": f"{NO_JSON}\nexit 9", "squeue": down}, monkeypatch)
    query = SlurmQuery(Shell())
    with pytest.raises(CommandFailed, match="Unable to contact slurm controller"):
        query.look("5")
    assert query.mode == "squeue-json"  # a failure is not a missing feature
