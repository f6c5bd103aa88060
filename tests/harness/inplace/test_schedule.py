"""Which rank runs which in-place test, and what its fixtures see (schedule.py): plain
data, tested with no store and no process group."""

from __future__ import annotations

import pytest

from rankgate.harness.inplace import schedule
from rankgate.harness.inplace.schedule import EVERY_RANK_HINT, PLAIN_PHASE, Schedule, Share
from rankgate.harness.item_settings import SPEC_KEY
from rankgate.harness.spec import WorldSpec

pytestmark = pytest.mark.unit

WORLD_ENTRY = {"group": "world", "op": "all_reduce", "state": "issued"}
SUBGROUP_ENTRY = {"group": "ranks [0]", "op": "all_reduce", "state": "completed"}


class _Item:
    """What the plan reads of a collected test: its id, its world marker's spec (in the
    stash, as the plugin leaves it) and its other markers."""

    def __init__(self, name: str, world: int | None = None, *, every_rank: bool = False):
        self.nodeid = self.name = f"t.py::{name}"
        self.stash = (
            {} if world is None else {SPEC_KEY: WorldSpec(size=world, backend="gloo", timeout=None)}
        )
        self._markers = {schedule.EVERY_RANK_MARKER} if every_rank else set()

    def get_closest_marker(self, name: str):
        return name if name in self._markers else None


def _planned(items, n: int, rank: int = 0, skip=lambda item: None) -> tuple[Schedule, list]:
    plan = Schedule(rank, n)
    mine = plan.make(items, skip, lambda item: 5.0)
    return plan, mine


def _one(share: Share, world_size: int = 2) -> Schedule:
    plan = Schedule(share.ranks[0], world_size)
    plan.shares = {"t.py::test_x": share}
    plan.index = {"t.py::test_x": 0}
    return plan


PLAIN = Share((1,), PLAIN_PHASE, 0, False)


@pytest.mark.parametrize(
    ("share", "entries", "in_collective", "hint"),
    [
        (PLAIN, [WORLD_ENTRY], False, EVERY_RANK_HINT),  # its ledger: the default group
        # no ledger (RANKGATE_LEDGER=0), or torch's "Default process group has not been initialized"
        (PLAIN, None, True, EVERY_RANK_HINT),
        (PLAIN, [SUBGROUP_ENTRY], False, ""),  # a group of its own
        (PLAIN, [], False, ""),  # no collective: an ordinary failure
        (Share((0, 1), 0, 0, False), [WORLD_ENTRY], True, ""),  # every_rank: runs on both
        (Share((0, 1), 0, 0, True), [WORLD_ENTRY], True, ""),  # a world(2) test
        (Share((1,), 1, 1, True), [WORLD_ENTRY], True, ""),  # a world(1) test in a sub-world
    ],
    ids=["plain-default-group", "plain-no-ledger", "plain-own-group", "plain-no-collective",
         "every-rank", "world-2", "world-1-sub-world"],
)  # fmt: skip
def test_only_a_plain_test_on_one_rank_that_used_the_group_is_told(
    share, entries, in_collective, hint
):
    assert _one(share).every_rank_hint("t.py::test_x", entries, in_collective) == hint


def test_a_plain_test_is_told_at_one_rank_too():
    # Launched with one rank, a plain test has no group either (as in the pool).
    one = Share((0,), PLAIN_PHASE, 0, False)
    assert _one(one, world_size=1).every_rank_hint("t.py::test_x", None, True) == EVERY_RANK_HINT
    every_rank = Share((0,), 0, 0, False)
    assert _one(every_rank, world_size=1).every_rank_hint("t.py::test_x", None, True) == ""


def test_plain_tests_have_no_group_and_come_last():
    items = [_Item("plain"), _Item("w2", 2), _Item("every", every_rank=True)]
    planned = [(item.name, share) for item, share in schedule.plan(items, 4, lambda i: None)[0]]
    assert [name for name, _ in planned] == ["t.py::every", "t.py::w2", "t.py::plain"]
    shares = dict(planned)
    assert shares["t.py::plain"].plain and shares["t.py::plain"].group == schedule.NO_GROUP
    assert shares["t.py::plain"].ranks == (0,)
    assert not shares["t.py::every"].plain and shares["t.py::every"].ranks == (0, 1, 2, 3)
    assert not shares["t.py::w2"].plain and shares["t.py::w2"].ranks == (0, 1)


SIX_W2_TWO_PLAIN = [*(_Item(f"w2_{i}", 2) for i in range(6)), _Item("p0"), _Item("p1")]


@pytest.mark.parametrize(
    ("rank", "share"),
    [
        (0, ["w2_0", "w2_2", "w2_4", "p0"]),
        (1, ["w2_0", "w2_2", "w2_4", "p1"]),
        (2, ["w2_1", "w2_3", "w2_5"]),
        (3, ["w2_1", "w2_3", "w2_5"]),
    ],
)
def test_each_rank_gets_its_share_in_run_order(rank, share):
    # world(2) tests dealt round-robin to two sub-worlds of four ranks, plain ones to ranks.
    plan, mine = _planned(SIX_W2_TWO_PLAIN, 4, rank)
    assert [item.nodeid for item in mine] == [f"t.py::{name}" for name in share]
    assert plan.run_tests == 8  # the run's, not this rank's share
    assert [plan.place(f"t.py::{n}") for n in ("w2_0", "w2_5", "p1")] == [0, 5, 7]
    assert plan.place("t.py::elsewhere") == -1 and not plan.in_run("t.py::elsewhere")


def test_the_ranks_of_a_test_and_who_speaks_for_them():
    plan, _ = _planned(SIX_W2_TWO_PLAIN, 4, rank=3)
    assert plan.ranks_of("t.py::w2_1") == (2, 3)
    assert plan.ranks_of("t.py::p1") == (1,)
    assert plan.ranks_of("t.py::not_planned") == (0, 1, 2, 3)  # outside the plan: every rank
    assert not plan.first_to_run("t.py::w2_1")  # rank 2 speaks for that sub-world
    two, _ = _planned(SIX_W2_TWO_PLAIN, 4, rank=2)
    assert two.first_to_run("t.py::w2_1")


def test_the_fixtures_see_the_tests_own_world():
    plan, _ = _planned([_Item("w2", 2), _Item("w4", 4), _Item("plain"),
                        _Item("every", every_rank=True)], 4, rank=3)  # fmt: skip
    # world(2) runs on ranks 0, 1 here (one test, one sub-world): rank 3 is in no share of it
    assert plan.ranks_of("t.py::w2") == (0, 1)
    assert (plan.rank_in_test("t.py::w4"), plan.world_in_test("t.py::w4")) == (3, 4)
    assert (plan.rank_in_test("t.py::plain"), plan.world_in_test("t.py::plain")) == (0, 1)
    assert (plan.rank_in_test("t.py::every"), plan.world_in_test("t.py::every")) == (3, 4)
    second, _ = _planned([_Item("a", 2), _Item("b", 2)], 4, rank=3)
    assert (second.rank_in_test("t.py::b"), second.world_in_test("t.py::b")) == (1, 2)


def test_store_keys_name_the_attempt_from_the_second_on():
    plan, _ = _planned(SIX_W2_TWO_PLAIN, 4)
    assert plan.store_key("t.py::w2_3") == 3
    assert plan.store_key("t.py::w2_3", attempt=1) == 3
    assert plan.store_key("t.py::w2_3", attempt=2) == "3.2"
    assert plan.store_key("t.py::elsewhere", attempt=2) is None


def test_a_skipped_test_is_dealt_out_as_a_plain_one_and_the_longest_timeout_is_kept():
    items = [_Item("w8", 8), _Item("w2", 2), _Item("plain")]
    plan = Schedule(1, 2)
    timeouts = {"t.py::w8": 900.0, "t.py::w2": 30.0, "t.py::plain": 60.0}
    skip = lambda item: "too big" if item.nodeid == "t.py::w8" else None  # noqa: E731
    mine = plan.make(items, skip, lambda item: timeouts[item.nodeid])
    # the run: w2 (every rank: world 2 = launched), then w8 and plain dealt to ranks 0, 1
    assert list(plan.index) == ["t.py::w2", "t.py::w8", "t.py::plain"]
    assert [item.nodeid for item in mine] == ["t.py::w2", "t.py::plain"]
    assert plan.share_of("t.py::w8").plain and plan.ranks_of("t.py::w8") == (0,)
    assert plan.longest_timeout == 900.0


# ini rankgate_one_world_per_rank: a suite whose set-up happens once per process, for the
# first world the process joins, needs each rank in one world of two or more ranks.
ONCE_PER_PROCESS = [_Item("w3", 3), *(_Item(f"w2_{i}", 2) for i in range(4)),
                    _Item("w1_0", 1), _Item("w1_1", 1), _Item("plain")]  # fmt: skip


def _one_world(items, n: int, rank: int = 0) -> Schedule:
    plan = Schedule(rank, n, one_world_per_rank=True)
    plan.make(items, lambda item: None, lambda item: 5.0)
    return plan


def test_one_world_per_rank_keeps_each_rank_in_one_world_of_two_or_more():
    plan = _one_world(ONCE_PER_PROCESS, 4)
    # world(2) first (the smallest), then its second block from the ranks left: world(3)
    # would need ranks 0-2, and ranks 0, 1 and 2 have each joined a world(2)
    assert [plan.ranks_of(f"t.py::w2_{i}") for i in range(4)] == [(0, 1), (2, 3)] * 2
    assert plan.share_of("t.py::w3").plain and plan.left_out_reason("t.py::w3") == (
        "world(3) needs 3 ranks that joined no other world (ini rankgate_one_world_per_rank), "
        "and this run's ranks are taken: world(2) on ranks 0-1 and 2-3; a launch of 5 ranks "
        "runs it, as does the pool"
    )
    # a one-rank world has no peer to set up with: world(1) tests run on any rank, as before
    assert [plan.ranks_of(f"t.py::w1_{i}") for i in range(2)] == [(0,), (1,)]
    assert plan.left_out_reason("t.py::w2_0") is None
    # a left-out test is dealt out after the plain ones, to one rank: it is reported once
    assert [plan.ranks_of(n) for n in ("t.py::plain", "t.py::w3")] == [(0,), (1,)]


def test_one_world_per_rank_runs_every_size_that_fits_beside_the_smaller_ones():
    plan = _one_world(ONCE_PER_PROCESS, 5)
    assert plan.ranks_of("t.py::w2_0") == plan.ranks_of("t.py::w2_1") == (0, 1)
    assert plan.ranks_of("t.py::w3") == (2, 3, 4)
    assert plan.share_of("t.py::w3").world_test and not plan.left_out
    # the rank numbers a test sees are its sub-world's, wherever the block starts
    four = _one_world(ONCE_PER_PROCESS, 5, rank=4)
    assert (four.rank_in_test("t.py::w3"), four.world_in_test("t.py::w3")) == (2, 3)


def test_one_world_per_rank_with_one_size_is_the_ordinary_plan():
    items = [_Item("w2_0", 2), _Item("w2_1", 2), _Item("w1", 1), _Item("every", every_rank=True)]
    at_two = _one_world(items[:3], 2)
    assert at_two.share_of("t.py::w2_0") == Share((0, 1), 0, 0, True)  # the launcher's group
    assert not at_two.left_out
    at_four = _one_world(items, 4)
    # every_rank joins the world of all four ranks, which world(2)'s blocks already took
    assert at_four.left_out_reason("t.py::every").startswith(
        "every_rank (a world of 4) needs 4 ranks that joined no other world"
    )
    assert at_four.ranks_of("t.py::w2_1") == (2, 3)
