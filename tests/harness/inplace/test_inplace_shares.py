"""Which plain tests in place are told they need @pytest.mark.every_rank (shares.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rankgate.harness.inplace.schedule import EVERY_RANK_HINT, PLAIN_PHASE, Share
from rankgate.harness.inplace.shares import ShareMixin

pytestmark = pytest.mark.unit

WORLD_ENTRY = {"group": "world", "op": "all_reduce", "state": "issued"}
SUBGROUP_ENTRY = {"group": "ranks [0]", "op": "all_reduce", "state": "completed"}


def _session(share: Share, world_size: int = 2) -> ShareMixin:
    session = ShareMixin()
    session.shares = {"t.py::test_x": share}
    session.launch = SimpleNamespace(rank=share.ranks[0], world_size=world_size)
    return session


ITEM = SimpleNamespace(nodeid="t.py::test_x")
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
    assert _session(share).every_rank_hint(ITEM, entries, in_collective) == hint


def test_a_plain_test_is_told_at_one_rank_too():
    # Launched with one rank, a plain test has no group either (as in the pool).
    one = Share((0,), PLAIN_PHASE, 0, False)
    assert _session(one, world_size=1).every_rank_hint(ITEM, None, True) == EVERY_RANK_HINT
    every_rank = Share((0,), 0, 0, False)
    assert _session(every_rank, world_size=1).every_rank_hint(ITEM, None, True) == ""


def test_plain_tests_have_no_group_and_come_last(monkeypatch):
    from rankgate.harness.inplace import schedule

    sizes = {"plain": None, "w2": SimpleNamespace(size=2), "every": None}
    monkeypatch.setattr(schedule, "world_spec", lambda item: sizes[item.name])
    items = [_item("plain"), _item("w2"), _item("every", every_rank=True)]
    planned = [(item.name, share) for item, share in schedule.plan(items, 4, lambda i: None)]
    assert [name for name, _ in planned] == ["every", "w2", "plain"]
    shares = dict(planned)
    assert shares["plain"].plain and shares["plain"].group == schedule.NO_GROUP
    assert shares["plain"].ranks == (0,)
    assert not shares["every"].plain and shares["every"].ranks == (0, 1, 2, 3)
    assert not shares["w2"].plain and shares["w2"].ranks == (0, 1)


def _item(name: str, every_rank: bool = False):
    marker = every_rank or None
    return SimpleNamespace(name=name, get_closest_marker=lambda _name: marker)
