"""inplace_collection: every rank runs rank 0's tests in rank 0's order with its seeds."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from rankgate.harness.inplace import collection
from rankgate.harness.inplace.collection import Collected

pytestmark = pytest.mark.unit


def _session(ids: list[str], **options) -> SimpleNamespace:
    items = [SimpleNamespace(nodeid=nodeid, n=n) for n, nodeid in enumerate(ids)]
    return SimpleNamespace(items=items, config=SimpleNamespace(option=SimpleNamespace(**options)))


def _everyone(*orders: list[str], seeds=None) -> list[Collected]:
    return [Collected(ids, [], ("host", r), seeds or {}) for r, ids in enumerate(orders)]


def test_the_same_tests_in_another_order_run_in_rank_0s_with_rank_0s_seed():
    session = _session(["a", "b", "b", "c"], randomly_seed=7)
    everyone = _everyone(["c", "b", "a", "b"], ["a", "b", "b", "c"], seeds={"randomly_seed": 3})
    collection.make_one(session, everyone, Path("out"))
    assert [(i.nodeid, i.n) for i in session.items] == [("c", 3), ("b", 1), ("a", 0), ("b", 2)]
    assert session.config.option.randomly_seed == 3


def test_rank_0s_items_stay_as_they_are():
    session = _session(["a", "b"])
    items = list(session.items)
    collection.make_one(session, _everyone(["a", "b"], ["b", "a"]), Path("out"))
    assert session.items == items


def test_only_the_seeds_a_plugin_drew_are_sent():
    assert collection.collected(_session(["a"], other=1), [], ("h", 1)).seeds == {}
    sent = collection.collected(_session(["a"], randomly_seed=5), ["e"], ("h", 1))
    assert sent == Collected(["a"], ["e"], ("h", 1), {"randomly_seed": 5})


def test_different_tests_are_a_usage_error_naming_them_and_each_ranks_log():
    everyone = _everyone(["a", "b"], ["a", "a", "c"])
    everyone[1].errors.append("test_x.py: ImportError")
    with pytest.raises(pytest.UsageError) as caught:
        collection.make_one(_session(["a", "b"]), everyone, Path("out"))
    assert str(caught.value) == (
        "rankgate in-place: ranks collected different tests, so their results cannot be "
        "merged:\n  rank 1 collected 3 tests, rank 0 2; only on rank 1: ['a', 'c']; missing "
        "on rank 1: ['b']\n  rank 1 could not collect test_x.py: ImportError (its log: "
        "out/pytest.rank1.log)"
    )
