"""Dispatch to a real local SLURM: every way a job can end, and what the report says.

Each test writes a small suite into its own folder and dispatches it on 2 tasks
(one node, ``srun``), with pytest in the harness's in-place mode on every task.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import time

import pytest

from rankgate.dispatch.job_outcome import JobOutcome
from rankgate.dispatch.job_result import render_report
from rankgate.dispatch.profile import profile_from_dict
from rankgate.dispatch.run import run_stage, wait_policy
from tests.warmstart import WARM_PYTHON

pytestmark = pytest.mark.hpc

SUITE = """
import os
import time

import pytest
import torch
import torch.distributed as dist


def test_launched_by_srun():
    assert os.environ["SLURM_NTASKS"] == "2"


@pytest.mark.world(2)
def test_all_reduce(rank, world_size):
    t = torch.ones(1) * (rank + 1)
    dist.all_reduce(t)
    assert t.item() == 3


@pytest.mark.every_rank  # in place, a plain test runs on one rank: this one needs both
@pytest.mark.skipif(os.environ.get("SUITE_MODE") != "fail-rank1", reason="fail mode only")
def test_fails_on_rank_1(rank):
    print(f"rank {rank} reached the check")
    assert rank != 1, "rank 1 disagrees on purpose"


@pytest.mark.every_rank  # both ranks are in it when the time limit ends the job
@pytest.mark.skipif(os.environ.get("SUITE_MODE") != "sleep", reason="sleep mode only")
def test_sleeps():
    time.sleep(600)
"""


@pytest.fixture
def dispatch(local_slurm, tmp_path):
    """Dispatch the suite in ``mode`` with profile overrides; returns (result, progress)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_remote.py").write_text(textwrap.dedent(SUITE))

    def go(mode: str = "pass", *, progress=None, local_dir=None, wait=None, **overrides):
        data = {
            "partition": local_slurm.partition,
            "tasks_per_node": 2,
            "time_limit": "5",
            "results_dir": str(tmp_path / "results"),
            "workdir": str(suite),
            "python": WARM_PYTHON.executable(),  # the jobs' ranks start warm: one node, here
            "env": {"SUITE_MODE": mode},
            **overrides,
        }
        profile = profile_from_dict(data, name="local")
        lines: list[str] = []

        def say(line: str) -> None:
            lines.append(line)
            if progress:
                progress(line)

        result = run_stage(
            profile,
            stage="hpc",
            pytest_args=["test_remote.py"],
            wait=wait_policy(profile, poll_s=0.5, **(wait or {})),
            progress=say,
            local_dir=local_dir,
        )
        return result, lines

    return go


def test_passing_suite_on_two_tasks(dispatch):
    result, progress = dispatch()
    report = render_report(result)
    assert result.passed, report
    assert (result.outcome, result.state, result.exit_code) == (
        JobOutcome.COMPLETED,
        "COMPLETED",
        "0:0",
    )
    merged = result.merged
    assert merged.world_size == 2 and merged.missing_ranks == []
    assert {t.name: t.verdict for t in merged.tests} == {
        "test_launched_by_srun": "passed",
        "test_all_reduce": "passed",
        "test_fails_on_rank_1": "skipped",
        "test_sleeps": "skipped",
    }
    assert sorted(p.name for p in result.job_dir.glob("junit.rank*.xml")) == [
        "junit.rank0.xml",
        "junit.rank1.xml",
    ]
    assert any("running on rankgate-node" in line for line in progress)
    assert (result.job_dir / "summary.json").is_file()
    assert result.exit_status == 0


# Every character here reaches a shell or sbatch somewhere: spaces split #SBATCH lines, a
# single quote made sbatch fail with "Unmatched '", %j in --output named another folder.
ODD = "it's 100%j;(a)&b `c` !d"


def test_results_and_workdir_with_spaces_quotes_and_shell_characters(dispatch, tmp_path):
    odd = tmp_path / f"check out {ODD}"
    odd.mkdir()
    (odd / "test_remote.py").write_text((tmp_path / "suite" / "test_remote.py").read_text())
    result, _ = dispatch(results_dir=str(tmp_path / f"results {ODD}"), workdir=str(odd))
    assert result.passed, render_report(result)
    assert result.job_dir.parent == tmp_path / f"results {ODD}"
    assert list(result.job_dir.glob("slurm-*.out")), "--output was split or rewritten"
    assert sorted(p.name for p in result.job_dir.glob("junit.rank*.xml")) == [
        "junit.rank0.xml",
        "junit.rank1.xml",
    ]


def test_failing_rank_is_named_with_its_log(dispatch):
    result, _ = dispatch("fail-rank1")
    report = render_report(result)
    assert result.outcome is JobOutcome.FAILED and result.state == "FAILED", report
    failing = [t for t in result.merged.tests if t.verdict == "failed"]
    assert [(t.name, t.failing_ranks) for t in failing] == [("test_fails_on_rank_1", (1,))]
    assert "rank 1 disagrees on purpose" in report
    # rank 1's own log is in the report, with what it printed; rank 0's is not.
    assert "----- rank 1: pytest.rank1.log -----" in report
    assert "rank 1 reached the check" in report
    assert "----- rank 0:" not in report
    assert result.exit_status == 1


@pytest.mark.slow
def test_job_killed_by_its_time_limit(dispatch):
    # SLURM's smallest time limit is a minute, enforced on a 30 s sweep: 60-90 s.
    result, _ = dispatch("sleep", time_limit="1")
    report = render_report(result)
    assert result.outcome is JobOutcome.TIMEOUT and result.state == "TIMEOUT", report
    # SLURM ends the ranks with SIGTERM: each writes its JUnit file with the test it was
    # in failed, naming the signal, so nothing is missing and that test is the failure.
    assert result.merged.missing_ranks == [], report
    verdicts = {t.name: t.verdict for t in result.merged.tests}
    assert verdicts["test_sleeps"] == "failed" and result.merged.failing_ranks == [0, 1], report
    assert "rank 1 received SIGTERM (the launcher or the CI stopped the job)" in report
    assert (
        "DUE TO TIME LIMIT"
        in (result.job_dir / next(p.name for p in result.job_dir.glob("slurm-*.out"))).read_text()
    )
    assert result.exit_status == 3


@pytest.mark.parametrize("slurm", ["json", "text"])
def test_status_comes_from_json_where_slurm_has_it_else_from_text(
    dispatch, tmp_path, monkeypatch, slurm
):
    """This SLURM (22.05) has squeue --json but not scontrol --json; a SLURM without the
    JSON serializer (stand-ins refusing --json, as 22.05 refuses it for scontrol) is read
    from squeue's and scontrol's text. Both see the same real job end the same way."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    refuse = "" if slurm == "json" else 'case " $* " in *" --json "*) exit 1;; esac\n'
    for name in ("squeue", "scontrol"):
        real = subprocess.run(["which", name], capture_output=True, text=True).stdout.strip()
        (bin_dir / name).write_text(
            f'#!/bin/sh\necho "{name} $*" >> {bin_dir}/calls\n'
            + refuse.replace("exit 1", f"echo \"{name}: unrecognized option '--json'\" >&2; exit 1")
            + f'exec {real} "$@"\n'
        )
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result, _ = dispatch("fail-rank1")
    assert (result.outcome, result.state, result.exit_code) == (JobOutcome.FAILED, "FAILED", "1:0")
    calls = (bin_dir / "calls").read_text().splitlines()
    text_looks = [c for c in calls if c.startswith(("squeue -h -j", "scontrol show job -o"))]
    json_looks = [c for c in calls if c.startswith("squeue --json -j")]
    assert calls[0].startswith("scontrol --json show job")  # tried first, refused by 22.05
    if slurm == "json":
        assert json_looks and not text_looks
    else:
        assert text_looks and len(json_looks) == 1  # refused once, never asked again


def test_job_cancelled_by_someone_else(dispatch):
    def cancel_once_running(line: str) -> None:
        if ": running" in line:
            job_id = line.split()[1].rstrip(":")
            subprocess.run(["scancel", job_id], check=True)

    result, _ = dispatch("sleep", progress=cancel_once_running)
    assert result.outcome is JobOutcome.CANCELLED, render_report(result)
    assert result.state.startswith("CANCELLED")
    assert result.exit_status == 3


def test_job_preempted_by_a_higher_tier_partition(dispatch):
    """A real preemption: an --exclusive job in partition urgent takes the node."""
    urgent: list[str] = []

    def preempt_once_running(line: str) -> None:
        if ": running" in line and not urgent:
            submitted = subprocess.run(
                [
                    "sbatch",
                    "--parsable",
                    "--partition=urgent",
                    "--exclusive",
                    "--output=/dev/null",
                    "--wrap",
                    "sleep 1",
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            urgent.append(submitted.stdout.strip())

    result, progress = dispatch("sleep", progress=preempt_once_running)
    report = render_report(result)
    assert (result.outcome, result.state) == (JobOutcome.PREEMPTED, "PREEMPTED"), report
    assert urgent, progress
    assert result.exit_status == 3
    _wait_until_ended(urgent[0])  # the node is free again for the next test


def _wait_until_ended(job_id: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        shown = subprocess.run(
            ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True, text=True
        )
        if shown.stdout.strip() not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING"):
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} still running after {timeout} s")


def _node_state(node: str) -> str:
    shown = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True)
    return shown.stdout.strip()


def test_node_failure_is_its_own_outcome_and_the_node_comes_back(dispatch, local_slurm):
    """A real node failure: the node is set DOWN under the running job (no requeue)."""
    node = local_slurm.node
    downed: list[str] = []

    def down_once_running(line: str) -> None:
        if ": running" in line and not downed:
            down = [f"NodeName={node}", "State=DOWN", "Reason=rankgate-test"]
            subprocess.run(["scontrol", "update", *down], check=True)
            downed.append(line)

    try:
        # A requeued job would wait for the node again; the deadline bounds that failure.
        result, progress = dispatch("sleep", progress=down_once_running, wait={"deadline_s": 60})
    finally:
        if _node_state(node).startswith(("down", "drain")):
            resume = ["scontrol", "update", f"NodeName={node}", "State=RESUME"]
            subprocess.run(resume, check=True)
    report = render_report(result)
    assert downed, progress
    assert (result.outcome, result.state) == (JobOutcome.NODE_FAIL, "NODE_FAIL"), report
    assert "node-fail" in report
    assert result.exit_status == 3
    # up again: idle, or already taken or planned (backfill) for the next queued job
    up = ("idle", "mixed", "alloc", "planned", "completing")
    assert _node_state(node).startswith(up), f"node not restored: {_node_state(node)}"


def test_ctrl_c_while_sbatch_submits_still_cancels_the_job(dispatch, tmp_path, monkeypatch):
    """SIGINT lands while the real sbatch runs: the job it submitted is cancelled."""
    real = subprocess.run(["which", "sbatch"], capture_output=True, text=True).stdout.strip()
    wrapper = tmp_path / "bin" / "sbatch"
    wrapper.parent.mkdir()
    # Submits for real, then interrupts rankgate (its parent) before printing the id.
    wrapper.write_text(
        f'#!/bin/sh\nout=$({real} "$@"); rc=$?\nkill -INT $PPID\necho "$out"\nexit $rc\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    result, progress = dispatch("sleep")
    assert result.outcome is JobOutcome.INTERRUPTED, render_report(result)
    assert result.job_id and result.state.startswith("CANCELLED"), progress
    queue = subprocess.run(["squeue", "-h", "-j", result.job_id], capture_output=True, text=True)
    assert queue.stdout.strip() == ""


def test_ctrl_c_that_kills_sbatch_before_it_prints_the_id_still_cancels_the_job(
    dispatch, tmp_path, monkeypatch
):
    """SLURM accepted the job, then the Ctrl-C killed sbatch before it printed the id:
    the job is found by its unique name and cancelled, not left running unseen."""
    real = subprocess.run(["which", "sbatch"], capture_output=True, text=True).stdout.strip()
    wrapper = tmp_path / "bin" / "sbatch"
    wrapper.parent.mkdir()
    # Submits for real, interrupts rankgate (its parent), and dies as sbatch would: no id.
    wrapper.write_text(f'#!/bin/sh\n{real} "$@" >/dev/null\nkill -INT $PPID\nexit 130\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    result, progress = dispatch("sleep")
    assert result.outcome is JobOutcome.INTERRUPTED, render_report(result)
    assert result.job_id.isdigit() and result.state.startswith("CANCELLED"), progress
    assert any(f"after the target accepted job {result.job_id}" in line for line in progress)
    named = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", result.job_id, "-o", "%j %T"],
        capture_output=True,
        text=True,
    )
    name, state = named.stdout.split()
    assert name.startswith("rankgate-hpc-") and state == "CANCELLED"


def test_deadline_cancels_the_job(dispatch, local_slurm):
    result, progress = dispatch("sleep", wait={"deadline_s": 3})
    assert result.outcome is JobOutcome.DEADLINE, render_report(result)
    assert any("deadline, cancelling" in line for line in progress)
    assert result.state.startswith("CANCELLED")  # SLURM agrees the job is gone
    queue = subprocess.run(["squeue", "-h", "-j", result.job_id], capture_output=True, text=True)
    assert queue.stdout.strip() == ""


def test_queue_timeout_cancels_a_job_that_never_starts(dispatch):
    # --begin keeps the job PENDING (reason BeginTime) for an hour.
    result, progress = dispatch(
        sbatch_options=["--begin=now+3600"], wait={"queue_timeout_s": 2, "run_timeout_s": 600}
    )
    assert result.outcome is JobOutcome.QUEUE_TIMEOUT, render_report(result)
    assert any("queued (BeginTime)" in line for line in progress), progress
    assert result.state.startswith("CANCELLED") and result.running_s == 0


def test_a_job_that_can_never_start_stops_with_slurms_reason(dispatch):
    # More tasks than the node has CPUs: sbatch accepts it, and it would stay
    # "queued (PartitionConfig)" forever. The deadline only bounds a regression.
    result, progress = dispatch(tasks_per_node=4096, wait={"deadline_s": 60})
    report = render_report(result)
    assert (result.outcome, result.reason) == (JobOutcome.UNSCHEDULABLE, "PartitionConfig"), report
    assert f"SLURM will never start job {result.job_id} as submitted (PartitionConfig)" in report
    assert any("unschedulable, cancelling" in line for line in progress)
    assert result.state.startswith("CANCELLED") and result.running_s == 0
    assert result.exit_status == 3


def test_a_held_job_ends_at_the_profiles_queue_timeout(dispatch):
    # JobHeldUser clears only when someone releases the job: the profile's queue
    # deadline (default 6 h) is what ends the wait.
    result, progress = dispatch(sbatch_options=["--hold"], queue_timeout=2)
    assert result.outcome is JobOutcome.QUEUE_TIMEOUT, render_report(result)
    assert any("queued (JobHeldUser)" in line for line in progress)
    assert result.state.startswith("CANCELLED")


def test_bad_partition_shows_sbatch_error_verbatim(dispatch, tmp_path):
    result, _ = dispatch(partition="no-such-partition")
    direct = subprocess.run(
        ["sbatch", "--parsable", "--partition=no-such-partition", "--wrap", "true"],
        capture_output=True,
        text=True,
    )
    assert direct.returncode != 0
    assert result.outcome is JobOutcome.SUBMIT_ERROR
    assert result.message == direct.stderr.strip()
    assert "invalid partition specified: no-such-partition" in render_report(result)
    assert result.exit_status == 3


def test_ssh_variant_runs_the_same_commands_through_ssh(dispatch, tmp_path, monkeypatch):
    """slurm-ssh through a stand-in ``ssh`` that runs the command here and logs the host."""
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    log = tmp_path / "ssh.log"
    shim = shim_dir / "ssh"
    shim.write_text(
        textwrap.dedent(f"""\
        #!/bin/bash
        while [[ $1 == -* ]]; do case $1 in -o|-p|-i|-l|-F) shift 2 ;; *) shift ;; esac; done
        echo "$1 $2" >> {log}
        shift
        exec bash -c "$*"
        """)
    )
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim_dir}:{os.environ['PATH']}")
    local_copy = tmp_path / "fetched"
    result, _ = dispatch(
        target="slurm-ssh", host="ci@login", ssh_options=["-p", "2222"], local_dir=local_copy
    )
    assert result.passed, render_report(result)
    assert result.job_dir == local_copy  # fetched from the "login node" with tar over ssh
    assert sorted(p.name for p in local_copy.glob("junit.rank*.xml")) == [
        "junit.rank0.xml",
        "junit.rank1.xml",
    ]
    calls = log.read_text().splitlines()
    assert all(line.startswith("ci@login ") for line in calls)
    assert any(" sbatch --parsable " in f" {line} " for line in calls)
    assert any(line.split()[1] == "tar" for line in calls)
