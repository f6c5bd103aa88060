"""Planted divergences on NCCL with nothing set: at world 4 in the pool, and in place under
torchrun at 2 and 4 ranks with merge-junit, each verdict names the culprit and its call site,
and never calls the culprit "passed".

NCCL returns from a collective before the GPU runs it, and matches calls by their number on
a communicator, not by what they are: which rank ends hung and which finishes is the GPU's
to say. The ledgers' cause is not, and it is what each test asserts. The world(2) pool cases
are test_planted_divergences.py's ``nccl`` ones; the CPU twins of these (gloo, world 3) are
there too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from jobs import run_torchrun_pytest
from test_planted_divergences import PLANTED, TIMEOUT, at, pool_session_verdicts, unasked_env

from rankgate.report.junit import merge_junit

pytestmark = [pytest.mark.dist, pytest.mark.gpu]

PLANTED4 = """\
import time

import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(4, backend="nccl", timeout=@TIMEOUT@)
def test_skipped_sync4(rank, device):
    t = torch.ones(4, device=device)
    if rank != 3:
        dist.all_reduce(t)  # skipped4:all_reduce
    dist.barrier()  # skipped4:barrier
    assert t.sum().item() == 16


@pytest.mark.world(4, backend="nccl", timeout=@TIMEOUT@)
def test_skipped_async4(rank, device):
    t = torch.ones(4, device=device)
    dist.broadcast(t, src=0)
    if rank != 3:
        work = dist.all_reduce(t, async_op=True)  # async4:all_reduce
        time.sleep(0.5)
        work.wait()
    dist.barrier()  # async4:barrier
    assert t.sum().item() == 16


@pytest.mark.world(4, backend="nccl", timeout=@TIMEOUT@)
def test_mismatched_dtypes4(rank, device):
    t = torch.ones(4, dtype=torch.float64 if rank == 1 else torch.float32, device=device)
    dist.all_reduce(t)  # dtypes4:all_reduce
    dist.barrier()


@pytest.mark.world(4, backend="nccl", timeout=@TIMEOUT@)
def test_mismatched_shapes4(rank, device):
    t = torch.ones(8 if rank == 2 else 4, device=device)
    dist.all_reduce(t)  # shapes4:all_reduce
    dist.barrier()


@pytest.mark.world(4, backend="nccl", timeout=@TIMEOUT@)
def test_mismatched_reduce_ops4(rank, device):
    t = torch.ones(4, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if rank == 2 else dist.ReduceOp.SUM)  # ops4
    dist.barrier()


@pytest.mark.world(4, backend="nccl", timeout=@TIMEOUT@)
def test_barrier_where_the_others_all_reduce4(rank, device):
    t = torch.ones(4, device=device)
    if rank == 3:
        dist.barrier()  # barrier4:barrier
    else:
        dist.all_reduce(t)  # barrier4:all_reduce
    dist.barrier()


@pytest.mark.world(4, backend="nccl", timeout=@TIMEOUT@)
def test_subgroup_only_some_join4(rank, device):
    pair = dist.new_group([0, 1])
    t = torch.ones(4, device=device)
    if rank == 0:
        dist.all_reduce(t, group=pair)  # subgroup4:all_reduce
    dist.barrier()  # subgroup4:barrier


@pytest.mark.world(4, backend="nccl", timeout=@TIMEOUT@)
def test_correct4(rank, device):
    t = torch.ones(4, device=device)
    dist.broadcast(t, src=0)
    dist.all_reduce(t)
    dist.barrier()
    assert t.sum().item() == 16
"""


def at4(tag: str) -> str:
    return at(tag, PLANTED4, "test_planted4.py")


CAUSES4 = {
    "test_skipped_sync4": (
        3,
        "likely cause: rank 3 never issued all_reduce #1 (float32[4]) that ranks 0, 1, 2 "
        f"issued at {at4('skipped4:all_reduce')}; rank 3 issued barrier #1 at "
        f"{at4('skipped4:barrier')} instead",
    ),
    "test_skipped_async4": (
        3,
        "likely cause: rank 3 never issued all_reduce #2 (float32[4]) that ranks 0, 1, 2 "
        f"issued at {at4('async4:all_reduce')}; rank 3 issued barrier #2 at "
        f"{at4('async4:barrier')} instead",
    ),
    "test_mismatched_dtypes4": (
        1,
        "ranks disagree at #1: rank 1 issued float64[4] where ranks 0, 2, 3 issued "
        f"float32[4] (all_reduce #1 at {at4('dtypes4:all_reduce')})",
    ),
    "test_mismatched_shapes4": (
        2,
        "ranks disagree at #1: rank 2 issued float32[8] where ranks 0, 1, 3 issued "
        f"float32[4] (all_reduce #1 at {at4('shapes4:all_reduce')})",
    ),
    "test_mismatched_reduce_ops4": (
        2,
        "ranks disagree at #1: rank 2 issued ReduceOp.MAX where ranks 0, 1, 3 issued "
        f"ReduceOp.SUM (all_reduce #1 at {at4('ops4')})",
    ),
    "test_barrier_where_the_others_all_reduce4": (
        3,
        f"ranks disagree at #1: rank 3 issued barrier at {at4('barrier4:barrier')} where "
        f"ranks 0, 1, 2 issued all_reduce float32[4] at {at4('barrier4:all_reduce')}",
    ),
    "test_subgroup_only_some_join4": (
        1,
        "likely cause: rank 1 never issued all_reduce #1 on ranks [0, 1] (float32[4]) that "
        f"rank 0 issued at {at4('subgroup4:all_reduce')}; rank 1's last: barrier #1 at "
        f"{at4('subgroup4:barrier')}",
    ),
}
"""Planted test -> (the culprit, the cause its verdict gives)."""


def _gpus(count: int) -> bool:
    return torch.cuda.is_available() and torch.cuda.device_count() >= count


def _passed_ranks(verdict: str) -> set[int]:
    """The ranks the verdict's outcomes call passed ("rank 2 passed", "ranks 0, 1 passed")."""
    outcomes = verdict.split("; likely cause")[0].split("; the ledgers")[0]
    passed = set()
    for part in outcomes.split("; "):
        found = re.fullmatch(r"ranks? ([\d, ]+) passed", part)
        if found:
            passed |= {int(r) for r in found.group(1).split(", ")}
    return passed


def _assert_names_the_culprit(verdict: str, culprit: int, cause: str) -> None:
    assert cause in verdict, verdict
    assert culprit not in _passed_ranks(verdict), verdict


def _write4(folder: Path) -> None:
    (folder / "test_planted4.py").write_text(PLANTED4.replace("@TIMEOUT@", str(TIMEOUT)))
    (folder / "pytest.ini").write_text("[pytest]\n")


def test_world_4_in_the_pool_names_every_culprit(tmp_path):
    # One test, one inner session: under xdist a module fixture would run it once per
    # worker, each time holding all four GPUs.
    if not _gpus(4):
        pytest.skip("needs 4 CUDA devices")
    _write4(tmp_path)
    verdicts = pool_session_verdicts(tmp_path, timeout=400)
    wrong = {}
    for test, (culprit, cause) in CAUSES4.items():
        verdict = verdicts[test]
        if (
            cause not in verdict
            or culprit in _passed_ranks(verdict)
            or not verdict.endswith(" (world 4, backend nccl)")
        ):
            wrong[test] = verdict
    assert verdicts["test_correct4"] == ""  # blames no one
    assert not wrong, "\n".join(f"{t}: {v}" for t, v in wrong.items())


IN_PLACE = [
    pytest.param(
        2,
        "test_planted.py::test_skipped_async",
        1,
        f"likely cause: rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at "
        f"{at('skipped_async:all_reduce')}; rank 1 issued barrier #2 at "
        f"{at('skipped_async:barrier')} instead",
        id="n2-skipped-async",
    ),
    pytest.param(
        2,
        "test_planted.py::test_mismatched_reduce_ops",
        None,  # two ranks, two ops: neither is the odd one out
        "ranks disagree at #1: rank 0 issued ReduceOp.SUM, rank 1 issued ReduceOp.MAX "
        f"(all_reduce #1 at {at('reduce_ops')})",
        id="n2-reduce-ops",
    ),
    *(
        pytest.param(4, f"test_planted4.py::{test}", *CAUSES4[test], id=f"n4-{test[5:]}")
        for test in ("test_skipped_sync4", "test_mismatched_dtypes4",
                     "test_barrier_where_the_others_all_reduce4")
    ),
]  # fmt: skip


@pytest.mark.torch_dist
@pytest.mark.slow  # starts torchrun and pytest on every rank
@pytest.mark.parametrize(("n", "test", "culprit", "cause"), IN_PLACE)
def test_in_place_names_the_culprit_on_rank_0_and_in_merge_junit(tmp_path, n, test, culprit, cause):
    if not _gpus(n):
        pytest.skip(f"needs {n} CUDA devices")
    (tmp_path / "test_planted.py").write_text(
        PLANTED.replace("@BACKEND@", "nccl").replace("@TIMEOUT@", str(TIMEOUT))
    )
    _write4(tmp_path)
    done = run_torchrun_pytest(
        tmp_path, "--junitxml=out/junit.xml", test, ranks=n, env=unasked_env(), timeout=240
    )
    assert done.returncode != 0, done.stdout + done.stderr
    merged = merge_junit([tmp_path / "out"])
    (case,) = [t for t in merged.tests if t.name == test.split("::")[1]]
    if culprit is None:
        assert cause in case.message, case.message
    else:
        _assert_names_the_culprit(case.message, culprit, cause)
    if not re.match(r"ranks? 0\b[^;]* crashed", case.message):  # a dead rank 0 shows nothing
        assert cause in done.stdout, done.stdout + done.stderr  # rank 0's terminal
