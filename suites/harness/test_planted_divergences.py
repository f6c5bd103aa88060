"""Planted divergences: the verdict names the first collective where the ranks' ledgers
part, in the pool (every case, one inner session) and in place under torchrun.

The inner file runs on gloo here and on NCCL where two GPUs are (``nccl`` cases); each
case ends in a check of its values, so a backend that completes a mismatched collective
silently still fails the test, and the ledgers still name the cause. Each outer test
asserts one case's exact verdict (the failure message in the inner JUnit file).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rankgate.harness import ledger
from rankgate.report.junit import merge_junit

pytestmark = pytest.mark.dist

TIMEOUT = 5
"""Each planted test's timeout (s): a hang costs this, the stacks and a pool respawn. At 2 s
a loaded CI host once stopped rank 0 before it issued its collective (the stacks, not the
ledgers, then named the cause)."""

PLANTED = """\
import time

import pytest
import torch
import torch.distributed as dist

BACKEND = "@BACKEND@"


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_skipped_sync(rank, device):
    t = torch.ones(4, device=device)
    dist.broadcast(t, src=0)  # skipped_sync:broadcast
    if rank != 1:
        dist.all_reduce(t)  # skipped_sync:all_reduce
    dist.barrier()  # skipped_sync:barrier
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_skipped_async(rank, device):
    t = torch.ones(4, device=device)
    dist.broadcast(t, src=0)
    if rank == 0:
        work = dist.all_reduce(t, async_op=True)  # skipped_async:all_reduce
        time.sleep(0.5)
        work.wait()
    dist.barrier()  # skipped_async:barrier
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_mismatched_ops(rank, device):
    t = torch.ones(4, device=device)
    if rank == 0:
        dist.all_reduce(t)  # mismatched_ops:all_reduce
    else:
        dist.broadcast(t, src=1)  # mismatched_ops:broadcast
    dist.barrier()
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_mismatched_shapes(rank, device):
    t = torch.ones(4 if rank == 0 else 8, device=device)
    dist.all_reduce(t)  # mismatched_shapes:all_reduce
    dist.barrier()
    assert t.sum().item() == 2 * t.numel()


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_subgroup_only_some_join(rank, device):
    pair = dist.new_group([0, 1])
    t = torch.ones(4, device=device)
    if rank == 0:
        dist.all_reduce(t, group=pair)  # subgroup:all_reduce
    dist.barrier()  # subgroup:barrier
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_only_rank_0_inside_an_if(rank, device):
    t = torch.ones(4, device=device)
    if rank == 0:
        dist.broadcast(t, src=0)  # only_rank_0:broadcast
    dist.all_reduce(t)  # only_rank_0:all_reduce
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_correct(rank, device):
    t = torch.ones(4, device=device)
    dist.broadcast(t, src=0)
    dist.all_reduce(t)
    dist.barrier()
    assert t.sum().item() == 8
"""


def at(tag: str) -> str:
    """'test_planted.py:12': where the line marked ``# tag`` is."""
    (line,) = [n for n, text in enumerate(PLANTED.splitlines(), 1) if text.endswith(f"# {tag}")]
    return f"test_planted.py:{line}"


def _two_gpus() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() >= 2


BACKENDS = [
    "gloo",
    pytest.param(
        "nccl",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not _two_gpus(), reason="needs 2 CUDA devices"),
        ],
    ),
]


def _write(folder: Path, backend: str) -> None:
    source = PLANTED.replace("@BACKEND@", backend).replace("@TIMEOUT@", str(TIMEOUT))
    (folder / "test_planted.py").write_text(source)
    (folder / "pytest.ini").write_text("[pytest]\n")


@pytest.fixture(scope="module", params=BACKENDS)
def pool_verdicts(request, tmp_path_factory) -> dict[str, str]:
    """Every planted case in one pool session: test name -> its failure message."""
    backend = request.param
    folder = tmp_path_factory.mktemp(f"planted-{backend}")
    _write(folder, backend)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--junitxml=j.xml"]
    # Asked for: unasked, NCCL ranks keep no ledger (docs/harness.md, "Cost").
    env = {**os.environ, ledger.ENV: "1"}
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    # Kept beside j.xml: the terminal's verdicts, for a run kept with --basetemp.
    (folder / "output.txt").write_text(done.stdout + done.stderr)
    assert done.returncode == 1, done.stdout + done.stderr
    verdicts = {}
    for case in ET.parse(folder / "j.xml").getroot().iter("testcase"):
        failure = case.find("failure")
        verdicts[case.get("name")] = "" if failure is None else failure.get("message", "")
    verdicts["backend"] = backend
    return verdicts


def _assert_cause(verdicts: dict[str, str], test: str, cause: str) -> None:
    """gloo: both ranks hang, exactly so. NCCL returns from a collective at once: which
    rank ends where is the GPU's to say, and only the ledgers' cause is asserted."""
    backend = verdicts["backend"]
    if backend == "gloo":
        assert verdicts[test] == f"ranks 0, 1 hung; likely cause: {cause} (world 2, backend gloo)"
    else:
        # A rank stuck outside collectives gets "(now ...)" after the cause.
        assert f"; likely cause: {cause}" in verdicts[test], verdicts[test]
        assert verdicts[test].endswith(f" (world 2, backend {backend})")


def test_a_skipped_sync_collective(pool_verdicts):
    _assert_cause(
        pool_verdicts,
        "test_skipped_sync",
        f"rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at "
        f"{at('skipped_sync:all_reduce')}; rank 1 issued barrier #2 at "
        f"{at('skipped_sync:barrier')} instead",
    )


def test_a_skipped_async_collective(pool_verdicts):
    # The issue's case: the stacks blamed rank 0, waiting on its work at the line after.
    _assert_cause(
        pool_verdicts,
        "test_skipped_async",
        f"rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at "
        f"{at('skipped_async:all_reduce')}; rank 1 issued barrier #2 at "
        f"{at('skipped_async:barrier')} instead",
    )


def test_mismatched_ops(pool_verdicts):
    _assert_cause(
        pool_verdicts,
        "test_mismatched_ops",
        f"ranks disagree at #1: rank 0 all_reduce float32[4] at "
        f"{at('mismatched_ops:all_reduce')}, rank 1 broadcast float32[4] at "
        f"{at('mismatched_ops:broadcast')}",
    )


def test_mismatched_shapes(pool_verdicts):
    backend = pool_verdicts["backend"]
    site = at("mismatched_shapes:all_reduce")
    if backend == "gloo":
        # gloo aborts the process that receives more bytes than it expects: its ledger
        # dies with it, and the verdict says where it was and what its peer was in.
        expected = (
            "rank 0 crashed (killed by SIGABRT (exit code -6)); rank 1 failed; likely cause: "
            f"rank 0 crashed in all_reduce at {site}; rank 1 was in all_reduce #1 "
            f"(float32[8]) issued at {site} (world 2, backend gloo)"
        )
        assert pool_verdicts["test_mismatched_shapes"] == expected
    else:
        # NCCL pairs the two calls: which rank hangs and which finishes is NCCL's; the
        # ledgers' cause is the same either way.
        _assert_cause(
            pool_verdicts,
            "test_mismatched_shapes",
            f"ranks disagree at #1: rank 0 all_reduce float32[4] at {site}, "
            f"rank 1 all_reduce float32[8] at {site}",
        )


def test_a_subgroup_collective_only_some_ranks_join(pool_verdicts):
    _assert_cause(
        pool_verdicts,
        "test_subgroup_only_some_join",
        f"rank 1 never issued all_reduce #1 on ranks [0, 1] (float32[4]) that rank 0 issued "
        f"at {at('subgroup:all_reduce')}; rank 1's last: barrier #1 at {at('subgroup:barrier')}",
    )


def test_a_collective_only_rank_0_issues(pool_verdicts):
    _assert_cause(
        pool_verdicts,
        "test_only_rank_0_inside_an_if",
        f"rank 1 never issued broadcast #1 (float32[4]) that rank 0 issued at "
        f"{at('only_rank_0:broadcast')}; rank 1 issued all_reduce #1 at "
        f"{at('only_rank_0:all_reduce')} instead",
    )


def test_a_correct_test_blames_no_one(pool_verdicts):
    assert pool_verdicts["test_correct"] == ""


@pytest.mark.torch_dist
@pytest.mark.slow  # starts torchrun and pytest on every rank
def test_in_place_the_skipped_async_collective_is_named_everywhere(tmp_path, monkeypatch):
    monkeypatch.setenv(ledger.ENV, "1")  # a GPU node's in-place group holds NCCL
    _write(tmp_path, "gloo")
    cmd = [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"),
        *("-m", "pytest", "-p", "no:cacheprovider", "--junitxml=out/junit.xml"),
        "test_planted.py::test_skipped_async",
    ]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    cause = (
        f"likely cause: rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at "
        f"{at('skipped_async:all_reduce')}; rank 1 issued barrier #2 at "
        f"{at('skipped_async:barrier')} instead"
    )
    assert done.returncode != 0
    assert cause in done.stdout, done.stdout + done.stderr  # rank 0's terminal
    merged = merge_junit(sorted((tmp_path / "out").glob("junit.rank*.xml")))
    (test,) = merged.tests
    assert test.message == f"ranks 0, 1 hung; {cause}"
