"""The ledger compares a collective's root and group as it compares dtype and shape
(issue 68): ``dist.broadcast(t, src=rank)`` with a different root per rank, and one
all_reduce called on a subgroup by one rank and on the default group by the other, hang
with the disagreement named, in the pool and in place. Before, both read "every hung rank
waits in broadcast" (the roots were not recorded) and "rank 1 never issued" (the group
was not compared)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from jobs import run_torchrun_pytest

pytestmark = pytest.mark.dist

SUITE = """\
import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2, backend="gloo", timeout=4)
def test_root_per_rank(rank):
    t = torch.ones(2)
    dist.broadcast(t, src=rank)


@pytest.mark.world(2, backend="gloo", timeout=4)
def test_group_per_rank(rank):
    pair = dist.new_group([0, 1])
    t = torch.ones(2)
    dist.all_reduce(t, group=pair if rank == 0 else None)
"""

ROOT = (
    "the ledgers cannot tell which rank is wrong: ranks disagree at #1: rank 0 issued "
    "src 0, rank 1 issued src 1 (broadcast #1 at test_{file}.py:9)"
)
GROUP = (
    "the ledgers cannot tell which rank is wrong: ranks disagree on the group of "
    "all_reduce at test_{file}.py:16: rank 0 issued it on ranks [0, 1], rank 1 issued it "
    "on the default group"
)


def test_in_the_pool_a_root_or_group_per_rank_is_named(pytester):
    pytester.makepyfile(test_inner=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(failed=2)
    for cause in (ROOT, GROUP):
        pattern = f"ranks 0, 1 hung; {cause.format(file='inner')}; *".replace("[", "[[]")
        result.stdout.fnmatch_lines([pattern])


@pytest.mark.torch_dist
def test_in_place_a_root_or_group_per_rank_is_named(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = run_torchrun_pytest(
        tmp_path, "-p", "no:randomly", "-q", "--junitxml=out/junit.xml", "test_suite.py",
        timeout=180,
    )  # fmt: skip
    assert proc.returncode != 0
    cases = {
        c.get("name"): c
        for c in ET.parse(tmp_path / "out" / "junit.rank0.xml").getroot().iter("testcase")
    }
    case = cases["test_root_per_rank"]
    message = case.find("failure").get("message")
    assert message.startswith("rank 0 hung ("), message
    assert ROOT.format(file="suite") in message, message
