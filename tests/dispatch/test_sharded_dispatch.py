"""A stage dispatched in shards on the two-node cluster: one job per shard, one verdict.

Each shard's job takes one node (two ranks); the shards run side by side, each on its
own node, and their results merge into one verdict that names each shard's node. A
shard whose job is killed leaves no results: its tests are reported not run, and the
dispatch fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rankgate.dispatch.job_outcome import JobOutcome
from rankgate.dispatch.profile import profile_from_dict
from rankgate.dispatch.run import run_sharded_stage, wait_policy
from rankgate.dispatch.sharded_run import render_sharded

pytestmark = pytest.mark.hpc

SUITE = """
import os
import socket
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2, backend="gloo")
def test_long(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2


@pytest.mark.world(2, backend="gloo")
@pytest.mark.parametrize("i", range(3))
def test_short(rank, i):
    # Each rank says where it ran; the killed shard's test waits to be killed.
    Path(os.environ["MARKERS"], f"{socket.gethostname()}-{i}-{rank}").touch()
    if os.environ.get("WAIT_FOR_KILL"):
        time.sleep(300)
    dist.barrier()
"""

# test_long alone is predicted as long as the three short ones: one shard each.
STORED = {
    "test_sharded.py::test_long": 3.0,
    **{f"test_sharded.py::test_short[{i}]": 1.0 for i in range(3)},
}


@pytest.fixture
def sharded(two_nodes, tmp_path):
    """(profile(shards=2, **env), the markers folder, the durations file) for SUITE."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_sharded.py").write_text(textwrap.dedent(SUITE))
    (suite / "pytest.ini").write_text("[pytest]\n")
    markers = tmp_path / "markers"
    markers.mkdir()
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps(STORED))

    def profile(shards=2, **env):
        data = {
            "partition": two_nodes.partition,
            "nodes": 1,
            "tasks_per_node": 2,
            "time_limit": "10",
            "results_dir": str(tmp_path / "results"),
            "workdir": str(suite),
            "python": sys.executable,
            "shards": shards,
            "durations": str(durations),
            "env": {"GLOO_SOCKET_IFNAME": two_nodes.ifname, "MARKERS": str(markers), **env},
        }
        return profile_from_dict(data, name="two-nodes-sharded")

    return profile, markers, durations


def _cases(folder: Path) -> dict[str, dict[str, str]]:
    root = ET.parse(folder / "junit.merged.xml").getroot()
    return {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        | {"verdict": _verdict(case)}
        for case in root.iter("testcase")
    }


def _verdict(case) -> str:
    for tag in ("failure", "error", "skipped"):
        found = case.find(tag)
        if found is not None:
            return "not run" if found.get("message", "").startswith("not run: ") else tag
    return "passed"


def test_two_shards_on_two_nodes_merge_into_one_verdict(sharded):
    profile, markers, durations = sharded
    lines: list[str] = []
    result = run_sharded_stage(
        profile(), stage="hpc", pytest_args=[], wait=wait_policy(profile(), poll_s=0.5),
        progress=lines.append,
    )  # fmt: skip
    report = render_sharded(result)
    assert result.passed and result.exit_status == 0, report
    assert [s.outcome for s in result.shards] == [JobOutcome.COMPLETED] * 2, report
    nodes = [s.node for s in result.shards]
    assert sorted(nodes) == ["node1", "node2"], report  # one node each, side by side
    # Each shard ran what the split gave it, and said so, on the node it names.
    assert [len(r.expected) for r in result.runs] == [1, 3]
    cases = _cases(result.folder)
    assert cases["test_long"] == {**cases["test_long"], "shard": "1/2", "node": nodes[0]}
    for i in range(3):
        case = cases[f"test_short[{i}]"]
        assert (case["shard"], case["node"], case["verdict"]) == ("2/2", nodes[1], "passed")
        assert {p.name for p in markers.glob(f"*-{i}-*")} == {
            f"{nodes[1]}-{i}-0",
            f"{nodes[1]}-{i}-1",
        }
    assert cases["test_long"]["verdict"] == "passed"
    assert f"shard 1/2: job {result.shards[0].job_id} on {nodes[0]}, completed" in report
    # Each shard stored its tests' times back into the durations file.
    stored = json.loads(durations.read_text())
    assert set(stored) == set(STORED) and stored != STORED
    # The pipeline's command prints the same verdict and exits 0.
    summary = json.loads((result.folder / "summary.json").read_text())
    assert summary["passed"] and [s["node"] for s in summary["shards"]] == nodes


def _cancel_when_running(lines: list[str], shard: str, done: list[str]) -> None:
    end = time.monotonic() + 120
    while time.monotonic() < end:
        running = [
            line
            for line in lines
            if line.startswith(f"shard {shard}: job ") and ": running" in line
        ]
        if running:
            job_id = running[0].split()[3].rstrip(":")
            time.sleep(3)  # the ranks are in the test by now
            subprocess.run(["scancel", job_id], check=True, timeout=30)
            done.append(job_id)
            return
        time.sleep(0.2)


def test_a_killed_shard_reports_its_tests_not_run_and_the_run_fails(sharded):
    profile, _, _ = sharded
    lines: list[str] = []
    killed: list[str] = []
    killer = threading.Thread(target=_cancel_when_running, args=(lines, "2/2", killed), daemon=True)
    killer.start()
    chosen = profile(WAIT_FOR_KILL="1")
    result = run_sharded_stage(
        chosen, stage="hpc", pytest_args=[], wait=wait_policy(chosen, poll_s=0.5),
        progress=lines.append,
    )  # fmt: skip
    killer.join(timeout=130)
    report = render_sharded(result)
    assert killed, "\n".join(lines)
    assert not result.passed and result.exit_status == 3, report
    assert [s.outcome for s in result.shards] == [JobOutcome.COMPLETED, JobOutcome.CANCELLED]
    # scancel's SIGTERM comes 3 s into the job. Ranks whose pytest was in the test by then
    # report it interrupted and the later two not run (both outcomes were seen, here and in
    # CI); ranks still starting die without results: all three are the lost shard's, not run.
    wrote = any(result.shards[1].job_dir.glob("junit.rank*.xml"))
    first = "failed" if wrote else "not run"
    cases = _cases(result.folder)
    assert cases["test_long"]["verdict"] == "passed"
    assert [cases[f"test_short[{i}]"]["verdict"] for i in range(3)] == [
        "failure" if wrote else "not run", "not run", "not run"
    ], report
    counts = result.merged.counts
    assert (counts["passed"], counts["failed"], counts["not run"]) == (
        (1, 1, 2) if wrote else (1, 0, 3)
    ), report
    lost = next(t for t in result.merged.tests if t.name == "test_short[0]")
    if wrote:
        assert "interrupted" in lost.message, lost.message
        assert "received SIGTERM (the launcher or the CI stopped the job)" in report
    else:
        assert lost.message.startswith(f"shard 2/2 (job {killed[0]} on "), lost.message
        assert "ended cancelled" in lost.message
        assert "3 tests not run: their shard left no results" in report
    # The shards' folders alone merge into the same verdict again.
    folders = [str(shard.job_dir) for shard in result.shards]
    again = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "merge-junit", "--shards", *folders, "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert again.returncode == 1, again.stderr
    verdicts = {t["id"].split("::")[-1]: t["verdict"] for t in json.loads(again.stdout)["tests"]}
    assert verdicts == {
        "test_long": "passed", "test_short[0]": first,
        **{f"test_short[{i}]": "not run" for i in (1, 2)},
    }  # fmt: skip


def test_a_shard_no_test_fell_to_is_not_submitted(sharded):
    profile, _, _ = sharded
    chosen = profile(shards=3)
    result = run_sharded_stage(
        chosen, stage="hpc", pytest_args=["-k", "long or short and 0"],
        wait=wait_policy(chosen, poll_s=0.5),
    )  # fmt: skip
    report = render_sharded(result)
    assert result.passed and result.exit_status == 0, report
    assert [r.expected for r in result.runs] == [
        ("test_sharded.py::test_long",),
        ("test_sharded.py::test_short[0]",),
        (),
    ]
    assert [bool(s.job_id) for s in result.shards] == [True, True, False]
    assert "shard 3/3: no test fell to it, not submitted" in report
    assert result.merged.counts["passed"] == 2 and len(result.merged.tests) == 2, report


def _kill_node_when_running(cluster, lines: list[str], shard: str, done: list[str]) -> None:
    end = time.monotonic() + 120
    while time.monotonic() < end:
        running = [
            line
            for line in lines
            if line.startswith(f"shard {shard}: job ") and ": running on " in line
        ]
        if running:
            node = running[0].rsplit(" ", 1)[-1]
            time.sleep(3)  # the ranks are in the test by now
            killed = cluster.run("kill-node", node)
            done.append(node if killed.returncode == 0 else killed.stdout + killed.stderr)
            return
        time.sleep(0.2)


@pytest.mark.slow  # SLURM declares the node down a SlurmdTimeout (30 s) and more after
def test_a_shard_whose_node_dies_reports_its_tests_not_run(sharded, two_nodes):
    profile, _, _ = sharded
    lines: list[str] = []
    killed: list[str] = []
    killer = threading.Thread(
        target=_kill_node_when_running, args=(two_nodes, lines, "2/2", killed), daemon=True
    )
    killer.start()
    chosen = profile(WAIT_FOR_KILL="1")
    try:
        result = run_sharded_stage(
            chosen, stage="hpc", pytest_args=[], wait=wait_policy(chosen, poll_s=0.5),
            progress=lines.append,
        )  # fmt: skip
    finally:
        killer.join(timeout=130)
        revived = [two_nodes.run("revive-node", node) for node in killed if node in two_nodes.nodes]
    report = render_sharded(result)
    assert killed and killed[0] in two_nodes.nodes, (killed, lines)
    assert all(r.returncode == 0 for r in revived), [r.stdout + r.stderr for r in revived]
    assert [s.outcome for s in result.shards] == [JobOutcome.COMPLETED, JobOutcome.NODE_FAIL]
    assert result.shards[1].node == killed[0] != result.shards[0].node, report
    assert not result.passed and result.exit_status == 3, report
    assert (result.merged.counts["passed"], result.merged.counts["not run"]) == (1, 3), report
    lost = next(t for t in result.merged.tests if t.name == "test_short[0]")
    assert lost.message == (
        f"shard 2/2 (job {result.shards[1].job_id} on {killed[0]}) ended node-fail and left "
        "no results"
    ), report
