"""The one table: every pair of rank outcomes, and the pool, in place and merge-junit
each giving the table's verdict for them."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from rankgate.harness.attempts import RERUN_KEYS
from rankgate.harness.inplace.reruns import attempt_of as inplace_attempt_of
from rankgate.harness.inplace.verdict import (
    DISAGREE_PREFIX,
    RankResult,
    combined,
    cross_rank_problem,
)
from rankgate.harness.outcome import RankOutcome
from rankgate.harness.pool.reruns import attempt_of as pool_attempt_of
from rankgate.harness.verdict import judge
from rankgate.harness.verdict_table import UnknownOutcome, combine
from rankgate.report.junit import merge_junit

pytestmark = pytest.mark.unit

KINDS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "crashed", "hung", "not run")

# The verdict of a test whose rank 0 ended as the row and rank 1 as the column, written
# out by hand from the rule in docs: P passed, F failed, E error, D error because the
# ranks disagree, S skipped, XF xfailed, XP xpassed, N not run.
GRID = """
           passed failed error skipped xfailed xpassed crashed hung not-run
passed     P      F      E     D       D       D       F       F    N
failed     F      F      F     F       F       F       F       F    F
error      E      F      E     E       E       E       F       F    E
skipped    D      F      E     S       D       D       F       F    N
xfailed    D      F      E     D       XF      XF      F       F    N
xpassed    D      F      E     D       XF      XP      F       F    N
crashed    F      F      F     F       F       F       F       F    F
hung       F      F      F     F       F       F       F       F    F
not-run    N      F      E     N       N       N       F       F    N
"""
LETTERS = {"P": "passed", "F": "failed", "E": "error", "D": "disagree", "S": "skipped",
           "XF": "xfailed", "XP": "xpassed", "N": "not run"}  # fmt: skip


def expected() -> dict[tuple[str, str], str]:
    rows = [line.split() for line in GRID.strip().splitlines()]
    columns = [c.replace("-", " ") for c in rows[0]]
    return {
        (row[0].replace("-", " "), column): LETTERS[letter]
        for row in rows[1:]
        for column, letter in zip(columns, row[1:], strict=True)
    }


EXPECTED = expected()
PAIRS = list(itertools.product(KINDS, KINDS))


def said(outcomes: dict[int, str], **kw) -> str:
    verdict = combine(outcomes, **kw)
    return "disagree" if verdict.disagree else verdict.verdict


def test_the_grid_covers_every_pair_and_is_symmetric():
    assert set(EXPECTED) == set(PAIRS)
    assert all(EXPECTED[a, b] == EXPECTED[b, a] for a, b in PAIRS)


@pytest.mark.parametrize(("rank0", "rank1"), PAIRS)
def test_the_table(rank0, rank1):
    assert said({0: rank0, 1: rank1}) == EXPECTED[rank0, rank1]


def test_a_strict_xfail_that_passed_everywhere_fails_and_beside_an_xfail_is_one():
    assert said({0: "xpassed", 1: "xpassed"}, strict=True) == "failed"
    assert said({0: "xpassed", 1: "xfailed"}, strict=True) == "xfailed"


def test_missing_interrupted_and_diverged():
    assert said({0: "passed", 1: "missing"}) == "error"
    assert said({0: "not run", 1: "missing"}) == "not run"  # it died before the stop
    assert said({0: "passed", 1: "interrupted"}) == "failed"
    assert said({0: "passed", 1: "diverged"}) == "failed"


def test_an_unknown_word_is_refused_by_name():
    with pytest.raises(UnknownOutcome, match="unknown rank outcome 'green'"):
        combine({0: "green"})


# ------------------------------------------------------------------- the pool

POOL = ("passed", "failed", "skipped", "xfailed", "crashed", "hung")
"""What a pool rank can end as (fixtures, markers and phases are the controller's)."""


@pytest.mark.parametrize(("rank0", "rank1"), list(itertools.product(POOL, POOL)))
def test_the_pool_judges_by_the_table(rank0, rank1):
    outcomes = [RankOutcome(rank=r, test_id="t", outcome=o) for r, o in enumerate((rank0, rank1))]
    status = judge(outcomes, 2, "gloo", test_id="t").status
    assert {"disagreement": "disagree"}.get(status, status) == EXPECTED[rank0, rank1]


# ------------------------------------------------------------------- in place

IN_PLACE = {  # a rank's own result of a test, as in-place ranks send it to each other
    "passed": RankResult("passed", "", ()),
    "failed": RankResult("failed", "AssertionError", ()),
    "error": RankResult("error", "fixture failed", ()),
    "skipped": RankResult("skipped", "no GPU", ()),
    "xfailed": RankResult("skipped", "known", (), xfail="xfailed"),
    "xpassed": RankResult("passed", "", (), xfail="xpassed"),
}


@pytest.mark.parametrize(("rank0", "rank1"), list(itertools.product(IN_PLACE, IN_PLACE)))
def test_in_place_judges_by_the_table(rank0, rank1):
    everyone = {0: IN_PLACE[rank0], 1: IN_PLACE[rank1]}
    verdict = combined(everyone)
    assert ("disagree" if verdict.disagree else verdict.verdict) == EXPECTED[rank0, rank1]
    for rank in (0, 1):  # each rank's terminal says the disagreement, naming both
        problem = cross_rank_problem(everyone, rank) or ""
        assert problem.startswith(DISAGREE_PREFIX) == (EXPECTED[rank0, rank1] == "disagree")


def test_in_place_a_ranks_xfail_is_named_xfailed_not_skipped():
    everyone = {0: IN_PLACE["passed"], 1: IN_PLACE["xfailed"]}
    assert cross_rank_problem(everyone, 0) == "ranks disagree: rank 1 xfailed; rank 0 passed"


# ------------------------------------------------------- an in-place rerun's attempt

NO_MARKER = [k for k in IN_PLACE if k != "xpassed"]  # only a marker makes an xpass
AS_POOL_RANK = {"xfailed": "failed", "xpassed": "passed"}
"""A rank's result under an xfail marker, as a pool's rank reports it: its body's."""


def _attempt_said(verdict: str) -> str:
    return {"disagreement": "disagree"}.get(verdict, verdict)


@pytest.mark.parametrize(("rank0", "rank1"), list(itertools.product(NO_MARKER, NO_MARKER)))
def test_an_in_place_attempt_is_judged_by_the_table(rank0, rank1):
    everyone = {0: IN_PLACE[rank0], 1: IN_PLACE[rank1]}
    attempt = inplace_attempt_of(1, everyone, 2, "gloo")
    assert _attempt_said(attempt.verdict) == EXPECTED[rank0, rank1]
    assert attempt.ranks == {0: rank0, 1: rank1}
    if rank0 in POOL and rank1 in POOL:  # and as the pool's attempt of the same outcomes
        outcomes = [
            RankOutcome(rank=r, test_id="t", outcome=o) for r, o in enumerate((rank0, rank1))
        ]
        pool = pool_attempt_of(1, judge(outcomes, 2, "gloo", test_id="t"), outcomes)
        assert attempt.verdict == pool.verdict


@pytest.mark.parametrize(("rank0", "rank1"), list(itertools.product(IN_PLACE, IN_PLACE)))
def test_an_in_place_attempt_under_an_xfail_marker_is_the_pools(rank0, rank1):
    # A pool's ranks report the body's failure or pass; the marker judges the last attempt.
    everyone = {0: IN_PLACE[rank0], 1: IN_PLACE[rank1]}
    attempt = inplace_attempt_of(1, everyone, 2, "gloo", marked=True)
    as_pool = (AS_POOL_RANK.get(rank0, rank0), AS_POOL_RANK.get(rank1, rank1))
    assert _attempt_said(attempt.verdict) == EXPECTED[as_pool]


def test_an_attempt_where_rank_1_xfails_and_rank_0_passes_is_a_disagreement_not_a_rerun():
    everyone = {0: IN_PLACE["passed"], 1: IN_PLACE["xfailed"]}
    attempt = inplace_attempt_of(1, everyone, 2, "gloo")
    assert (attempt.verdict, attempt.ranks) == ("disagreement", {0: "passed", 1: "xfailed"})
    assert (
        attempt.summary == "ranks disagree (world 2, backend gloo): rank 1 xfailed; rank 0 passed"
    )
    assert attempt.verdict not in RERUN_KEYS


# ------------------------------------------------------------------- merge-junit

JUNIT = {  # each outcome as an in-place rank's JUnit case holds it
    "passed": "",
    "failed": '<failure message="AssertionError: 1 != 2">trace</failure>',
    "error": '<error message="failed on setup with &quot;fixture&quot;">trace</error>',
    "skipped": '<skipped message="no GPU"/>',
    "xfailed": '<skipped type="pytest.xfail" message="known"/>',
    "xpassed": '<properties><property name="rankgate.outcome" value="xpassed"/></properties>',
    "crashed": '<failure message="crashed on rank R: the rank ended while running this test"/>',
    "hung": '<failure message="rank R hung (stopped at the timeout of 5 s)"/>',
    "not run": '<error message="failed on setup with &quot;not run: rank 0 stopped the run'
    '&quot;">not run</error>',
}


def _rank_file(folder: Path, rank: int, body: str) -> None:
    case = f'<testcase classname="t" name="x" time="0.1">{body.replace("R", str(rank))}</testcase>'
    props = '<properties><property name="world_size" value="2"/></properties>'
    (folder / f"junit.rank{rank}.xml").write_text(
        f'<testsuites><testsuite name="pytest">{props}{case}</testsuite></testsuites>'
    )


@pytest.mark.parametrize(("rank0", "rank1"), PAIRS)
def test_merge_junit_judges_by_the_table(tmp_path, rank0, rank1):
    _rank_file(tmp_path, 0, JUNIT[rank0])
    _rank_file(tmp_path, 1, JUNIT[rank1])
    report = merge_junit([tmp_path])
    (test,) = report.tests
    disagree = test.message.startswith("ranks disagree: ")
    assert ("disagree" if disagree else test.verdict) == EXPECTED[rank0, rank1]
    assert test.rank_outcomes == {0: rank0, 1: rank1}
    green = EXPECTED[rank0, rank1] in ("passed", "skipped", "xfailed", "xpassed")
    assert report.ok is green
