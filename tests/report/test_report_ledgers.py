"""report.html shows the ranks' ledgers side by side where a failed test's verdict has them."""

from __future__ import annotations

import pytest

from rankgate.harness import divergence
from rankgate.report.failures import FailedTest, RankDetail
from rankgate.report.html import _failure

pytestmark = pytest.mark.unit

TABLE = (
    "Collectives issued around the divergence:\n"
    "     rank 0                              rank 1\n"
    ">#1  all_reduce float32[4] x.py:5 issued  barrier x.py:6 issued\n"
)


def _test(text: str) -> FailedTest:
    return FailedTest(
        id="x.py::test_x",
        outcome="failed",
        source="j.xml",
        message="ranks 0, 1 hung; likely cause: rank 1 never issued all_reduce #1",
        ranks=(RankDetail(rank=0, outcome="hung"), RankDetail(rank=1, outcome="hung")),
        text=text,
    )


def test_the_ledgers_table_is_shown_beside_the_message():
    html = _failure(_test(f"ranks 0, 1 hung; ...\n\n{TABLE}\n--- rank 0: hung ---\nstacks"))
    assert '<pre class="ledgers">Collectives issued around the divergence:\n' in html
    assert "&gt;#1  all_reduce float32[4] x.py:5 issued  barrier x.py:6 issued\n</pre>" in html


def test_no_table_without_one():
    assert 'class="ledgers"' not in _failure(_test("ranks 0, 1 hung; stacks only"))


def test_the_rank_the_ledgers_blame_is_the_root_cause():
    from rankgate.report.failures import _root_cause_first

    ranks = (RankDetail(rank=0, outcome="hung"), RankDetail(rank=1, outcome="hung"))
    blamed = divergence.blamed_in(
        "ranks 0, 1 hung; likely cause: rank 1 never issued all_reduce #2 (float32[4]) that "
        "rank 0 issued at x.py:12; rank 1 issued barrier #2 at x.py:15 instead"
    )
    assert blamed == (1,)
    assert [r.rank for r in _root_cause_first(ranks, (0, 1), blamed)] == [1, 0]
    assert [r.rank for r in _root_cause_first(ranks, (0, 1))] == [0, 1]
