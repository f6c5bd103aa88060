"""Which plain tests in place are told they need @pytest.mark.every_rank (shares.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rankgate.harness.inplace.schedule import EVERY_RANK_HINT, Share
from rankgate.harness.inplace.shares import ShareMixin

pytestmark = pytest.mark.unit

WORLD_ENTRY = {"group": "world", "op": "all_reduce", "state": "issued"}
SUBGROUP_ENTRY = {"group": "ranks [0]", "op": "all_reduce", "state": "completed"}


def _session(share: Share) -> ShareMixin:
    session = ShareMixin()
    session.shares = {"t.py::test_x": share}
    session.launch = SimpleNamespace(rank=1, world_size=2)
    return session


ITEM = SimpleNamespace(nodeid="t.py::test_x")
PLAIN = Share((1,), 0, 0, False)


@pytest.mark.parametrize(
    ("share", "entries", "in_collective", "hint"),
    [
        (PLAIN, [WORLD_ENTRY], False, EVERY_RANK_HINT),  # its ledger: the default group
        (PLAIN, None, True, EVERY_RANK_HINT),  # no ledger (NCCL): its stack or its error
        (PLAIN, [SUBGROUP_ENTRY], False, ""),  # a group of its own
        (PLAIN, [], False, ""),  # no collective: an ordinary failure
        (Share((0, 1), 0, 0, False), [WORLD_ENTRY], True, ""),  # every_rank: runs on both
        (Share((0, 1), 0, 0, True), [WORLD_ENTRY], True, ""),  # a world(2) test
        (Share((1,), 1, 1, True), [WORLD_ENTRY], True, ""),  # a world(1) test in a sub-world
    ],
)
def test_only_a_plain_test_on_one_rank_that_used_the_group_is_told(
    share, entries, in_collective, hint
):
    assert _session(share).every_rank_hint(ITEM, entries, in_collective) == hint
