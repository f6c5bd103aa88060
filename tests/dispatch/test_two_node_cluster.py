"""The two-node cluster's own life cycle: checkouts never collide, nothing outlives it.

These tests run a private copy of scripts/slurm/two-node-slurm.sh in a checkout of
their own, so its tag (namespaces, links, subnet, state folder) is not the session's;
it runs beside the session's cluster and is stopped at the end whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.hpc

Script = Callable[..., subprocess.CompletedProcess]


@pytest.fixture
def private_two_nodes(two_node_cluster, private_copy) -> Script:
    """Runs a copy of the script whose two nodes are this test's own; stops them at the end."""
    return private_copy(two_node_cluster.script)


def _paths(run: Script) -> dict[str, str]:
    shown = run("paths")
    assert shown.returncode == 0, shown.stderr
    return dict(line.split("=", 1) for line in shown.stdout.splitlines())


def _ip(*args: str) -> list[dict]:
    out = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out or "[]")


def _daemons(state_dir: str) -> list[int]:
    """Processes started with this cluster's slurm.conf (slurmctld and each slurmd)."""
    conf = f"{state_dir}/slurm.conf".encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if proc.name.isdigit() and conf in argv:
            found.append(int(proc.name))
    return found


def _left(paths: dict[str, str]) -> dict[str, list]:
    """What of one cluster is on this machine: namespaces, links, hosts files, daemons."""
    tag = paths["tag"]
    return {
        "namespaces": sorted(
            n["name"] for n in _ip("netns", "list") if n["name"].startswith(f"rankgate-{tag}-")
        ),
        "links": sorted(
            n["ifname"] for n in _ip("link", "show") if n["ifname"].startswith(f"rg{tag}")
        ),
        "hosts": sorted(p.name for p in Path("/etc/netns").glob(f"rankgate-{tag}-*")),
        "daemons": _daemons(paths["dir"]),
    }


def _full(paths: dict[str, str]) -> None:
    tag = paths["tag"]
    left = _left(paths)
    hosts = [f"rankgate-{tag}-{h}" for h in ("ctl", "node1", "node2")]
    assert left["namespaces"] == hosts and left["hosts"] == hosts, left
    assert left["links"] == sorted(f"rg{tag}{end}" for end in ("1", "2", "b", "c")), left
    assert len(left["daemons"]) == 3, left  # slurmctld, two slurmd


def test_two_checkouts_side_by_side_and_stop_leaves_nothing(private_two_nodes, two_node_cluster):
    run = private_two_nodes
    started = run("start")
    assert started.returncode == 0, started.stderr
    mine = _paths(run)
    session = dict(line.split("=", 1) for line in two_node_cluster.run("paths").stdout.splitlines())
    assert mine["tag"] != session["tag"] and mine["net"] != session["net"], (mine, session)
    assert run("status").returncode == 0 and two_node_cluster.run("status").returncode == 0
    _full(mine)
    assert run("stop").returncode == 0
    assert _left(mine) == {"namespaces": [], "links": [], "hosts": [], "daemons": []}
    assert two_node_cluster.run("status").returncode == 0, "stopping one cluster hurt the other"


def test_start_sweeps_what_a_dead_run_left(private_two_nodes):
    run = private_two_nodes
    assert run("start").returncode == 0
    paths = _paths(run)
    before = _left(paths)["daemons"]
    # A run that died half way: the controller is gone, the rest of it is still here.
    ctld = int(Path(paths["dir"], "slurmctld.pid").read_text())
    os.kill(ctld, signal.SIGKILL)
    assert run("status").returncode != 0
    again = run("start")
    assert again.returncode == 0, again.stderr
    _full(paths)
    assert not set(before) & set(_left(paths)["daemons"]), "the dead run's slurmd survived"


def test_a_session_killed_before_its_release_leaves_nothing(private_two_nodes):
    """The only session is SIGKILLed (a CI timeout): the reaper that acquire left removes
    the daemons, namespaces, links and state folder within seconds."""
    run = private_two_nodes
    session = subprocess.Popen(["sleep", "600"])  # stands in for a test session
    try:
        acquired = run("acquire", str(session.pid))
        assert acquired.returncode == 0, acquired.stderr
        paths = _paths(run)
        _full(paths)
    finally:
        session.kill()
        session.wait()
    deadline = time.monotonic() + 60
    while Path(paths["dir"]).exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not Path(paths["dir"]).exists(), "the cluster of a killed session is still there"
    assert _left(paths) == {"namespaces": [], "links": [], "hosts": [], "daemons": []}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("kill-node", "node3"), "kill-node needs node1 or node2, got 'node3'"),
        (("revive-node",), "revive-node needs node1 or node2, got ''"),
        (("acquire", "x"), "acquire needs the PID of a running process, got 'x'"),
        (("reboot",), "usage:"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(private_two_nodes, args, message):
    done = private_two_nodes(*args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1
