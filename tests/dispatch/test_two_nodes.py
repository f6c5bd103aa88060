"""Two hosts, one job: the same suites across the nodes of the two-node cluster.

Each node is a network namespace with its own address, hostname and slurmd
(scripts/slurm/two-node-slurm.sh). Every job here has world 4: two ranks on node1,
two on node2, gloo between them over the cluster network (GLOO_SOCKET_IFNAME=rgnet0,
as a site names its own interface). A probe test in each job checks that the ranks
really sit on both hosts and talk over that network, beside a subset of the comm
suite's world-4 collectives.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import shlex
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from rankgate.dispatch.job_outcome import JobOutcome
from rankgate.dispatch.job_result import render_report
from rankgate.dispatch.profile import profile_from_dict
from rankgate.dispatch.run import run_stage, wait_policy

pytestmark = pytest.mark.hpc

REPO = Path(__file__).resolve().parents[2]
BENCHMARK_NET = ipaddress.ip_network("198.18.0.0/15")
# A slice of a real dist suite: every collective in fp32 at world 4, sizes up to 256 KiB.
COLLECTIVES = "suites/comm/test_comm_collectives.py"
SELECT = "(gloo-w4 and fp32 and not MiB) or spans_both_hosts"

PROBE = '''
import socket
from collections import Counter

import pytest
import torch
import torch.distributed as dist


def established_peers():
    """Remote IPv4 addresses of this host's established TCP connections."""
    peers = set()
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[3] == "01":
                remote = fields[2].split(":")[0]
                peers.add(socket.inet_ntoa(bytes.fromhex(remote)[::-1]))
    return peers


@pytest.mark.world(4, backend="gloo")
def test_spans_both_hosts(rank, world_size):
    hosts = [None] * world_size
    dist.all_gather_object(hosts, socket.gethostname())
    assert Counter(hosts) == {"node1": 2, "node2": 2}, hosts
    t = torch.full((1 << 18,), float(rank + 1))
    dist.all_reduce(t)
    assert t.eq(10).all()
    other = "node2" if socket.gethostname() == "node1" else "node1"
    assert socket.gethostbyname(other) in established_peers(), "no connection to " + other
'''


def _pytest_args(probe: Path) -> list[str]:
    # The probe lives outside the checkout: -c keeps the checkout's configuration.
    return ["-c", str(REPO / "pyproject.toml"), COLLECTIVES, str(probe), "-k", SELECT]


@pytest.fixture
def probe(tmp_path) -> Path:
    path = tmp_path / "probe" / "test_probe.py"
    path.parent.mkdir()
    path.write_text(PROBE)
    return path


def _profile(cluster, tmp_path: Path, **overrides):
    data = {
        "partition": cluster.partition,
        "nodes": 2,
        "tasks_per_node": 2,
        "time_limit": "10",
        "results_dir": str(tmp_path / "results"),
        "workdir": str(REPO),
        "python": sys.executable,
        "env": {"GLOO_SOCKET_IFNAME": cluster.ifname},
        **overrides,
    }
    return profile_from_dict(data, name="two-nodes")


def _merge_junit(folder: Path) -> tuple[int, dict]:
    """``rankgate merge-junit`` over a job's per-rank files: (exit status, its JSON)."""
    files = sorted(str(p) for p in folder.glob("junit.rank*.xml"))
    done = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "merge-junit", *files, "--world", "4", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def _expected_ids() -> set[str]:
    """The collective tests SELECT picks, as this checkout collects them."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", COLLECTIVES, "-k", SELECT],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    ids = {line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line}
    assert ids, done.stdout + done.stderr
    return ids


def test_each_node_is_a_host_of_its_own_with_no_route_out(two_nodes):
    shown = subprocess.run(
        [
            "srun",
            "-N",
            "2",
            "--ntasks-per-node=1",
            "-l",
            "bash",
            "-c",
            f"echo $(hostname) $(ip -4 -o addr show {two_nodes.ifname} | awk '{{print $4}}'); "
            "ip route get 192.0.2.1 2>&1 | head -n1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = sorted(shown.stdout.splitlines())
    hosts = dict(line.split(": ", 1)[1].split() for line in lines if " 198." in line)
    assert sorted(hosts) == ["node1", "node2"], shown.stdout
    addresses = [ipaddress.ip_interface(a) for a in hosts.values()]
    assert all(a.ip in BENCHMARK_NET for a in addresses) and addresses[0] != addresses[1]
    # No default route on a node: an address outside the cluster's /24 is unreachable.
    unreachable = [line for line in lines if "Network is unreachable" in line]
    assert len(unreachable) == 2, shown.stdout


def test_sbatch_two_nodes_inplace_world4_one_verdict(two_nodes, tmp_path, probe):
    """``sbatch -N 2 --ntasks-per-node=2`` (rankgate dispatch) with pytest in place on
    every rank; the four JUnit files merge into one verdict."""
    profile = _profile(two_nodes, tmp_path)
    result = run_stage(
        profile,
        stage="hpc",
        pytest_args=_pytest_args(probe),
        wait=wait_policy(profile, poll_s=0.5),
    )
    report = render_report(result)
    assert (result.outcome, result.state) == (JobOutcome.COMPLETED, "COMPLETED"), report
    script = (result.job_dir / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=2" in script
    status, merged = _merge_junit(result.job_dir)
    verdicts = {t["id"].split("::")[-1]: t["verdict"] for t in merged["tests"]}
    assert status == 0 and merged["ok"] and merged["ranks"] == [0, 1, 2, 3], report
    assert verdicts.pop("test_spans_both_hosts") == "passed"
    assert set(verdicts) == _expected_ids()
    assert set(verdicts.values()) == {"passed"}
    assert result.passed and result.merged.world_size == 4


TORCHRUN_JOB = """#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 --time=10 --no-requeue
#SBATCH --output={out}/slurm-%j.out --chdir={repo}
# One torchrun agent per node; they meet in a c10d store on the first node.
set -uo pipefail
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export HEAD=$head PORT=$((20000 + SLURM_JOB_ID % 10000)) GLOO_SOCKET_IFNAME={ifname}
srun bash {out}/agent.sh
"""

AGENT = """exec >{out}/agent.$SLURMD_NODENAME.log 2>&1
exec {python} -m torch.distributed.run --nnodes=2 --nproc-per-node=2 \\
    --rdzv-backend=c10d --rdzv-endpoint="$HEAD:$PORT" --rdzv-id="$SLURM_JOB_ID" \\
    --log-dir={out}/torchrun."$SLURMD_NODENAME" --redirects=3 \\
    -m pytest -p no:cacheprovider --rankgate-mode=inplace {args} --junitxml={out}/junit.xml
"""


def test_torchrun_two_nodes_c10d_rendezvous(two_nodes, tmp_path, probe):
    """``torchrun --nnodes=2`` on each node of an sbatch job, c10d rendezvous on node1."""
    out = tmp_path / "torchrun"
    out.mkdir()
    (out / "agent.sh").write_text(
        AGENT.format(out=out, python=sys.executable, args=shlex.join(_pytest_args(probe)))
    )
    script = tmp_path / "torchrun.sbatch"
    script.write_text(TORCHRUN_JOB.format(out=out, repo=REPO, ifname=two_nodes.ifname))
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--wait", str(script)], capture_output=True, text=True, timeout=600
    )
    job_id = submitted.stdout.strip().split(";")[0]
    logs = "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(out.glob("*.out")))
    logs += "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(out.glob("*.log")))
    assert submitted.returncode == 0, f"{submitted.stderr}\n{logs}"
    state = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True
    ).stdout
    assert "JobState=COMPLETED" in state and "NodeList=node[1-2]" in state, state
    status, merged = _merge_junit(out)
    verdicts = {t["id"].split("::")[-1]: t["verdict"] for t in merged["tests"]}
    assert status == 0 and merged["ok"] and merged["ranks"] == [0, 1, 2, 3], logs
    assert verdicts.pop("test_spans_both_hosts") == "passed"
    assert set(verdicts) == _expected_ids() and set(verdicts.values()) == {"passed"}
    # Each node's agent kept its own log, and its two local ranks' output.
    for node in two_nodes.nodes:
        assert (out / f"agent.{node}.log").is_file()
        local = sorted(p.parent.name for p in (out / f"torchrun.{node}").rglob("stdout.log"))
        assert local == ["0", "1"], f"{node}: {local}"


HANG_S = 10
"""The lost-node test's timeout: well inside SlurmdTimeout (30 s), after which the
controller declares the node dead, so the surviving ranks end by the harness first."""

LOSS = f"""
import os
import socket
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(4, backend="gloo", timeout={HANG_S})
def test_all_reduce_while_a_node_dies(rank):
    print(f"rank {{rank}} on {{socket.gethostname()}}: in the loop", flush=True)
    Path(os.environ["MARKERS"], str(rank)).touch()
    while not Path(os.environ["MARKERS"], "stop").exists():
        t = torch.ones(1)
        dist.all_reduce(t)
        assert t.item() == 4
        time.sleep(0.05)


@pytest.mark.world(4, backend="gloo")
def test_never_reached(rank):
    pass
"""


def _kill_when_all_in_loop(cluster, markers: Path, node: str, killed: list[str]) -> None:
    end = time.monotonic() + 300
    while time.monotonic() < end:
        if all((markers / str(r)).exists() for r in range(4)):
            time.sleep(0.5)  # a few all_reduces in flight across the nodes
            done = cluster.run("kill-node", node)
            killed.append(done.stdout + done.stderr)
            return
        time.sleep(0.1)
    killed.append("the ranks never reached the loop")


def test_a_node_lost_mid_job(two_nodes, tmp_path):
    """node2 dies under a running job (link cut, then every process on it killed):
    the job ends node-fail, node1's ranks end at the test's timeout with their stacks,
    and the logs of both nodes' ranks come back."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_loss.py").write_text(textwrap.dedent(LOSS))
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {"GLOO_SOCKET_IFNAME": two_nodes.ifname, "MARKERS": str(markers)}
    profile = _profile(two_nodes, tmp_path, workdir=str(suite), env=env)
    killed: list[str] = []
    killer = threading.Thread(
        target=_kill_when_all_in_loop, args=(two_nodes, markers, "node2", killed), daemon=True
    )
    killer.start()
    try:
        result = run_stage(
            profile,
            stage="hpc",
            # tee-sys: what a rank prints reaches its log as it goes, not when the test
            # ends, which a rank killed mid-test never reaches.
            pytest_args=["test_loss.py", "--capture=tee-sys"],
            wait=wait_policy(profile, poll_s=0.5),
        )
    finally:
        (markers / "stop").touch()
        killer.join(timeout=310)
        revived = two_nodes.run("revive-node", "node2")
    assert killed and "node2 killed" in killed[0], killed
    assert revived.returncode == 0, revived.stdout + revived.stderr
    report = render_report(result)
    assert (result.outcome, result.state) == (JobOutcome.NODE_FAIL, "NODE_FAIL"), report
    assert result.exit_status == 3
    merged = result.merged
    assert merged.missing_ranks == [2, 3], report
    lost = {t.name: t for t in merged.tests}["test_all_reduce_while_a_node_dies"]
    assert lost.verdict == "failed" and lost.failing_ranks == (0, 1, 2, 3), report
    # node1's ranks ended by the harness at the test's timeout, each with its stack,
    # stuck in the collective that node2 no longer answers.
    line = textwrap.dedent(LOSS).splitlines().index("        dist.all_reduce(t)") + 1
    for rank in (0, 1):
        text = lost.results[rank].text
        assert text.startswith(
            f"rank {rank} hung (did not finish within the test's timeout of {HANG_S} s; "
            "the rank exited)"
        ), text
        assert f"line {line} in test_all_reduce_while_a_node_dies" in text, text
    never = {t.name: t for t in merged.tests}["test_never_reached"]
    # node1's ranks stopped the run at the hang; node2's died before it.
    assert never.rank_outcomes == {0: "not run", 1: "not run", 2: "missing", 3: "missing"}
    assert never.verdict == "not run"
    # Both nodes' logs: node2's ranks printed up to the kill; each slurmd logged the job.
    for rank, node in ((0, "node1"), (1, "node1"), (2, "node2"), (3, "node2")):
        log = (result.job_dir / f"rank{rank}.log").read_text()
        assert f"rank {rank} on {node}: in the loop" in log, log
    assert "rank 2 on node2: in the loop" in report
    srun = next(result.job_dir.glob("slurm-*.out")).read_text()
    assert "Node failure on node2" in srun, srun
    # Each node's slurmd log has the job's step (node2's up to its death).
    for node in two_nodes.nodes:
        assert f"StepId={result.job_id}.0" in two_nodes.slurmd_log(node).read_text(), node


def _planted_subworlds():
    """tests/harness/test_inplace_subworlds.py: its planted suites, launcher and verdicts."""
    path = REPO / "tests" / "harness" / "test_inplace_subworlds.py"
    spec = importlib.util.spec_from_file_location("planted_subworlds", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # its imports of its folder's helpers (warmstart)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def test_sub_worlds_across_two_nodes_give_torchrun_verdicts(two_nodes, tmp_path):
    """``srun`` with 4 ranks on two nodes (rankgate dispatch) runs the planted sub-world
    suite: world(2) tests in two sub-worlds, one per node, world(3) across both; each test's
    verdict and global ranks as under torchrun on one host (issue 61)."""
    planted = _planted_subworlds()
    folder, notes = tmp_path / "suite", tmp_path / "notes"
    for made in (folder, notes):
        made.mkdir()
    (folder / "test_suite.py").write_text(planted.SUITE)
    (folder / "note.py").write_text(planted.NOTE)
    (folder / "pytest.ini").write_text("[pytest]\n")
    env = {"GLOO_SOCKET_IFNAME": two_nodes.ifname, "SUBWORLD_NOTES": str(notes)}
    profile = _profile(two_nodes, tmp_path, workdir=str(folder), env=env)
    args = ["-p", "no:randomly", "--rankgate-timeout=60", "test_suite.py"]
    result = run_stage(
        profile, stage="hpc", pytest_args=args, wait=wait_policy(profile, poll_s=0.5)
    )
    status, merged = _merge_junit(result.job_dir)
    torchrun = planted.launch(tmp_path / "torchrun", planted.SUITE)[2]
    assert status == 1 and merged["ranks"] == [0, 1, 2, 3], render_report(result)
    assert planted.verdicts(merged) == planted.verdicts(torchrun)
    assert planted.verdicts(merged)["test_w2[1]"] == ("failed", {"2": "passed", "3": "failed"})
