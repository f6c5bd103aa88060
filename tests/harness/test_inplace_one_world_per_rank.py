"""A set-up made once per process, for the first world the process joins (DeepSpeed's
shared-memory collective is one): under torchrun with 4 ranks, the ordinary plan puts
ranks 0-2 in a world(3) and then ranks 2-3 in a world(2), so rank 3 waits for a buffer
rank 2 never makes and ranks 0-1 use a set-up made for three ranks. With ini
``rankgate_one_world_per_rank`` each rank joins one world of two or more ranks: the
world(2) tests pass on ranks 0-1 and 2-3, and world(3) is skipped with the launch size
that runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jobs import run_torchrun_pytest

# slow: starts torchrun with 4 ranks, and pytest on every rank, twice
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

ONCE = """\
import os
import time

import torch
import torch.distributed as dist

_world = None
\"\"\"(size, rank) of the first world this process set up for: it is never set up again.\"\"\"


def set_up():
    # As a shared-memory collective does: each rank makes a buffer named after the
    # world's MASTER_PORT and opens every peer's. Once per process.
    global _world
    if _world is not None:
        return
    size, rank, port = dist.get_world_size(), dist.get_rank(), os.environ["MASTER_PORT"]
    _world = (size, rank)
    folder = os.environ["ONCE_BUFFERS"]
    with open(os.path.join(folder, f"{port}.{rank}"), "w"):
        pass
    for peer in range(size):
        while not os.path.exists(os.path.join(folder, f"{port}.{peer}")):
            time.sleep(0.05)  # waits for the peer's buffer


def all_reduce(t):
    size = dist.get_world_size()
    if size > 1 and _world[0] != size:  # a one-rank group needs no buffer
        raise RuntimeError(f"set up for a world of {_world[0]}, used in a world of {size}")
    dist.all_reduce(t)
"""

SUITE = """\
import pytest
import torch

import once


def reduce_ones(world_size):
    once.set_up()
    t = torch.ones(1)
    once.all_reduce(t)
    assert t.item() == world_size


@pytest.mark.world(3)
def test_w3(world_size):
    reduce_ones(world_size)


@pytest.mark.world(2)
@pytest.mark.parametrize("i", range(4))
def test_w2(world_size, i):
    reduce_ones(world_size)


@pytest.mark.world(1)
@pytest.mark.parametrize("i", range(2))
def test_w1(world_size, i):
    reduce_ones(world_size)


def test_plain():
    pass
"""

W2 = [f"test_w2[{i}]" for i in range(4)]
W1 = ["test_w1[0]", "test_w1[1]"]


def _run(folder: Path, ini: str) -> tuple[subprocess.CompletedProcess[str], dict[str, dict]]:
    """torchrun with 4 ranks on the suite, then merge-junit: its run and each test's merge."""
    folder.mkdir()
    (folder / "once.py").write_text(ONCE)
    (folder / "test_suite.py").write_text(SUITE)
    (folder / "pytest.ini").write_text(f"[pytest]\n{ini}")
    buffers = folder / "buffers"
    buffers.mkdir()
    pythonpath = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "ONCE_BUFFERS": str(buffers), "PYTHONPATH": pythonpath}
    args = ("-p", "no:randomly", "-q", "--color=no", "--rankgate-timeout=60",
            "--junitxml=out/junit.xml", "test_suite.py")  # fmt: skip
    proc = run_torchrun_pytest(folder, *args, ranks=4, env=env, timeout=300)
    merge = [sys.executable, "-m", "rankgate.cli", "merge-junit", "--json", "out"]
    merged = subprocess.run(merge, cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    assert merged.stdout, merged.stderr + proc.stdout[-3000:] + proc.stderr[-3000:]
    tests = {t["id"].split("::", 1)[1]: t for t in json.loads(merged.stdout)["tests"]}
    return proc, tests


def test_the_ordinary_plan_mixes_set_up_and_fresh_ranks_in_a_world(tmp_path):
    proc, tests = _run(tmp_path / "shared", "")
    verdicts = {name: t["verdict"] for name, t in tests.items()}
    assert verdicts == {"test_w3": "passed", "test_w2[0]": "failed", "test_w2[2]": "failed",
                        "test_w2[1]": "failed", "test_w2[3]": "not run",
                        **dict.fromkeys(W1, "passed"), "test_plain": "passed"}  # fmt: skip
    # ranks 2-3: rank 2 set up for world(3); rank 3 waits for a buffer rank 2 never makes
    assert tests["test_w2[1]"]["message"].startswith(
        "rank 2 failed; rank 3 hung; likely cause: rank 3 in user code at once.py:24"
    ), tests["test_w2[1]"]["message"]
    # ranks 0-1: set up for three ranks, used with two
    assert tests["test_w2[0]"]["ranks"] == {"0": "failed", "1": "failed"}
    assert "RuntimeError: set up for a world of 3, used in a world of 2" in proc.stdout
    assert proc.returncode != 0


def test_one_world_per_rank_runs_every_world_that_fits(tmp_path):
    proc, tests = _run(tmp_path / "one", "rankgate_one_world_per_rank = true\n")
    verdicts = {name: t["verdict"] for name, t in tests.items()}
    assert verdicts == {"test_w3": "skipped", **dict.fromkeys(W2, "passed"),
                        **dict.fromkeys(W1, "passed"), "test_plain": "passed"}  # fmt: skip
    assert tests["test_w3"]["message"] == (
        "world(3) needs 3 ranks that joined no other world (ini rankgate_one_world_per_rank), "
        "and this run's ranks are taken: world(2) on ranks 0-1 and 2-3; a launch of 5 ranks "
        "runs it, as does the pool"
    )
    ranks = {name: sorted(int(r) for r in tests[name]["ranks"]) for name in W2}
    assert ranks == {"test_w2[0]": [0, 1], "test_w2[1]": [2, 3],
                     "test_w2[2]": [0, 1], "test_w2[3]": [2, 3]}  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
