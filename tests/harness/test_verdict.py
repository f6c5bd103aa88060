import pytest

from rankgate.harness.outcome import RankOutcome
from rankgate.harness.verdict import StrayOutcome, judge, reproduction_line

pytestmark = pytest.mark.unit


def outcomes(*kinds, detail=""):
    return [
        RankOutcome(test_id="t", rank=r, outcome=k, detail=detail or f"{k} on {r}")
        for r, k in enumerate(kinds)
    ]


def test_all_passed():
    assert judge(outcomes("passed", "passed"), 2, "gloo", test_id="t").status == "passed"


def test_one_failure_names_the_rank():
    v = judge(outcomes("passed", "failed", "passed"), 3, "gloo", test_id="t")
    assert (v.status, v.failing_ranks) == ("failed", (1,))
    assert v.summary == "rank 1 failed; ranks 0, 2 passed (world 3, backend gloo)"
    assert "failed on 1" in v.text and "passed on 0" not in v.text


def test_crash_is_named_first_with_its_exit():
    v = judge(
        [
            RankOutcome(test_id="t", rank=0, outcome="hung", detail="stopped"),
            RankOutcome(test_id="t", rank=1, outcome="failed", detail="peer closed"),
            RankOutcome(
                test_id="t", rank=2, outcome="crashed", detail="killed by SIGSEGV (exit code -11)"
            ),
        ],
        3,
        "gloo",
        test_id="t",
    )
    assert v.summary == (
        "rank 2 crashed (killed by SIGSEGV (exit code -11)); rank 1 failed; rank 0 hung "
        "(world 3, backend gloo)"
    )
    assert v.failing_ranks == (0, 1, 2)
    assert (
        v.text.index("rank 2: crashed")
        < v.text.index("rank 1: failed")
        < v.text.index("rank 0: hung")
    )


def test_disagreement():
    v = judge(outcomes("skipped", "passed", "skipped"), 3, "gloo", test_id="t")
    assert v.status == "disagreement"
    assert v.summary == "ranks disagree (world 3, backend gloo): ranks 0, 2 skipped; rank 1 passed"


def test_unanimous_skip_keeps_the_reason():
    v = judge(outcomes("skipped", "skipped", detail="no GPU"), 2, "gloo", test_id="t")
    assert (v.status, v.summary) == ("skipped", "no GPU")


def test_reproduction_line():
    assert reproduction_line("a.py::t[x]", 2, "gloo", 7, 0) == (
        "reproduce: pytest 'a.py::t[x]' --rankgate-seed=0  # world=2 backend=gloo seed=7"
    )


def test_reproduction_line_with_a_launcher_and_no_seed():
    assert reproduction_line(
        "a.py::t", 2, "gloo", None, 3, command="mpirun -np 2 python -m pytest"
    ) == (
        "reproduce: mpirun -np 2 python -m pytest 'a.py::t' --rankgate-seed=3  # world=2 backend=gloo"
    )


def test_an_outcome_of_another_test_is_refused():
    stray = [
        RankOutcome(test_id="a.py::t_now", rank=0, outcome="passed"),
        RankOutcome(test_id="a.py::t_before", rank=1, outcome="failed"),
    ]
    with pytest.raises(StrayOutcome) as info:
        judge(stray, 2, "gloo", test_id="a.py::t_now")
    assert str(info.value) == "judging 'a.py::t_now', got rank 1's outcome of 'a.py::t_before'"


def test_reproduction_line_keeps_the_runs_timeout():
    # A hang reproduced without the run's --rankgate-timeout would wait the default 300 s.
    assert reproduction_line("a.py::t", 2, "gloo", 7, 0, timeout=5.0) == (
        "reproduce: pytest 'a.py::t' --rankgate-seed=0 --rankgate-timeout=5"
        "  # world=2 backend=gloo seed=7"
    )


def _ledger(arg):
    return [
        {"group": "world", "ranks": [0, 1, 2], "seq": 1, "op": "all_reduce", "arg": arg,
         "file": "/x/test_x.py", "line": 9, "state": "completed", "reduce": "SUM"}
    ]  # fmt: skip


def test_ranks_that_all_passed_but_issued_different_calls_fail():
    ranks = outcomes("passed", "passed", "passed")
    for r, o in enumerate(ranks):
        o.ledger = _ledger("int32[4]" if r == 1 else "float32[4]")
    verdict = judge(ranks, 3, "gloo", test_id="t")
    assert verdict.status == "failed"
    assert verdict.failing_ranks == (1,)
    assert verdict.summary == (
        "rank 1 diverged; ranks 0, 2 passed; likely cause: ranks disagree at #1: rank 1 "
        "issued int32[4] where ranks 0, 2 issued float32[4] (all_reduce #1 at test_x.py:9) "
        "(world 3, backend gloo)"
    )
    assert "Collectives issued around the divergence" in verdict.text


def test_a_rank_that_skipped_a_collective_is_never_passed():
    ranks = outcomes("hung", "passed")
    ranks[0].ledger = [{**_ledger("float32[4]")[0], "ranks": [0, 1], "state": "issued"}]
    ranks[1].ledger = []
    verdict = judge(ranks, 2, "gloo", test_id="t")
    assert verdict.failing_ranks == (0, 1)
    assert verdict.summary.startswith(
        "rank 1 diverged; rank 0 hung; likely cause: rank 1 never issued all_reduce #1 "
        "(float32[4]) that rank 0 issued at test_x.py:9; rank 1 issued no collective"
    )
