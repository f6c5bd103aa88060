"""The local SLURM that the hpc tests run on: it runs 2 tasks, and sessions share it safely.

The lease tests run a private copy of scripts/slurm/local-slurm.sh in a checkout of
their own (its own state folder and port, derived from that path), so they start and
stop a cluster of their own and never touch the session's.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.hpc


def test_srun_runs_two_tasks(local_slurm):
    out = subprocess.run(
        ["srun", "-n", "2", "bash", "-c", "echo $SLURM_PROCID/$SLURM_NTASKS"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert sorted(out.stdout.split()) == ["0/2", "1/2"]


Script = Callable[..., subprocess.CompletedProcess]


@pytest.fixture
def private_cluster(local_slurm, private_copy) -> Script:
    """Runs a copy of the script whose cluster is this test's own; stops it at the end."""
    return private_copy(local_slurm.script)


def _holder() -> subprocess.Popen:
    """A process standing in for a test session that holds a lease."""
    return subprocess.Popen(["sleep", "600"])


def _up(run: Script) -> bool:
    return run("status").returncode == 0


def test_a_cluster_started_by_hand_is_never_stopped_by_a_session(private_cluster):
    run = private_cluster
    started = run("start")
    assert started.returncode == 0, started.stderr
    assert run("start").stdout == started.stdout  # idempotent
    session = _holder()
    try:
        acquired = run("acquire", str(session.pid))
        assert acquired.returncode == 0 and acquired.stdout == started.stdout, acquired.stderr
        assert run("release", str(session.pid)).returncode == 0
        assert _up(run), "release stopped a cluster the session did not start"
    finally:
        session.kill()
        session.wait()
    assert run("stop").returncode == 0 and not _up(run)


def test_the_last_live_session_stops_the_cluster_a_session_started(private_cluster):
    run = private_cluster
    a, b, c = _holder(), _holder(), _holder()
    try:
        assert not _up(run)
        for session in (a, b, c):
            acquired = run("acquire", str(session.pid))
            assert acquired.returncode == 0, acquired.stderr
        conf = Path(acquired.stdout.strip().removeprefix("export SLURM_CONF="))
        assert conf.is_file() and _up(run)
        run("release", str(a.pid))
        assert _up(run), "stopped while b and c still hold leases"
        c.kill()  # c ends without releasing: its lease no longer counts
        c.wait()
        run("release", str(b.pid))
        assert not _up(run), "the last live session left the cluster running"
        assert not conf.parent.exists(), "the session's cluster left its folder behind"
    finally:
        for session in (a, b, c):
            session.kill()
            session.wait()


def test_acquire_refuses_a_pid_that_is_not_running(private_cluster):
    done = private_cluster("acquire", "999999999")
    assert done.returncode != 0
    assert "acquire needs the PID of a running process" in done.stderr
    assert not _up(private_cluster)


def test_a_session_killed_before_its_release_leaves_no_cluster(private_cluster):
    """The only session is SIGKILLed (a CI timeout): the reaper that acquire left stops
    the daemons and removes the folder within seconds, so the port is free again."""
    run = private_cluster
    session = _holder()
    try:
        acquired = run("acquire", str(session.pid))
        assert acquired.returncode == 0, acquired.stderr
        conf = Path(acquired.stdout.strip().removeprefix("export SLURM_CONF="))
        assert _up(run)
    finally:
        session.kill()
        session.wait()
    deadline = time.monotonic() + 30
    while conf.parent.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not conf.parent.exists(), "the cluster of a killed session is still there after 30 s"
    daemons = subprocess.run(["pgrep", "-f", str(conf)], capture_output=True, text=True)
    assert daemons.stdout == "", f"daemons left running: {daemons.stdout}"
    successor = _holder()
    try:  # the next session starts its cluster on the same port
        assert run("acquire", str(successor.pid)).returncode == 0 and _up(run)
        run("release", str(successor.pid))
        assert not _up(run)
    finally:
        successor.kill()
        successor.wait()
