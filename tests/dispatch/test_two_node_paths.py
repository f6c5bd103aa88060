"""scripts/slurm/two-node-slurm.sh: every name a cluster leaves on the machine is its checkout's.

``paths`` prints the tag and the names ``start`` would use, without starting anything,
so this needs bash only (the hpc tests test_two_node_cluster.py and test_two_nodes.py
start the cluster itself).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm" / "two-node-slurm.sh"
IFNAMSIZ = 15
"""Longest network interface name Linux accepts."""


def _paths(root: Path, **env: str) -> dict[str, str]:
    script = root / "scripts" / "slurm" / "two-node-slurm.sh"
    if not script.exists():  # the whole folder: the script sources leases.sh beside it
        shutil.copytree(SCRIPT.parent, script.parent)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RANKGATE_SLURM")}
    done = subprocess.run(
        ["bash", str(script), "paths"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**clean, "TMPDIR": "/tmp", **env},
        check=True,
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def test_two_checkouts_never_share_a_name(tmp_path):
    first, second = _paths(tmp_path / "a"), _paths(tmp_path / "b")
    assert _paths(tmp_path / "a") == first  # a checkout finds its own cluster again
    shared = {k for k in first if first[k] == second[k]}
    # Only what lives inside the namespaces (and so cannot collide) is the same.
    assert shared == {"ifname", "net"}, (first, second)
    assert first["net"] == "", "paths chose a subnet without starting anything"
    for found in (first, second):
        tag = found["tag"]
        assert found["dir"] == f"/tmp/rankgate-slurm2-{os.getuid()}-{tag}"
        assert [found[h] for h in ("ctl", "node1", "node2")] == [
            f"rankgate-{tag}-{h}" for h in ("ctl", "node1", "node2")
        ]
        assert found["bridge"].startswith(f"rg{tag}")


def test_every_link_name_fits_linux(tmp_path):
    found = _paths(tmp_path / "a")
    # The bridge is the longest host-side name (the veths are rg<tag>c, rg<tag>1, rg<tag>2).
    assert len(found["bridge"]) <= IFNAMSIZ and len(found["ifname"]) <= IFNAMSIZ


def test_the_state_folder_can_be_moved(tmp_path):
    found = _paths(tmp_path / "a", RANKGATE_SLURM2_DIR=str(tmp_path / "mine"))
    assert found["dir"] == str(tmp_path / "mine")
