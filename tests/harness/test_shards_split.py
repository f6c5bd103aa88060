"""Shard K of N by stored time (rankgate.harness.shards.split) and the durations file."""

from __future__ import annotations

import json
import random

import pytest

from rankgate.harness.shards.durations import DurationsError, read_durations, store_durations
from rankgate.harness.shards.split import ShardSpecError, parse_shard, split

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "shard"), [("1/2", (1, 2)), ("2/2", (2, 2)), (" 3 / 5 ", (3, 5))])
def test_parse_shard(text, shard):
    assert parse_shard(text) == shard


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("3/2", "K must be 1 to N and N at least 1 (shards count from 1), got K=3, N=2"),
        ("0/2", "got K=0, N=2"),
        ("0/0", "got K=0, N=0"),
        ("1/0", "got K=1, N=0"),
        ("a/2", "write K/N with whole numbers"),
        ("1.5/2", "write K/N with whole numbers"),
        ("-1/2", "write K/N with whole numbers"),
        ("2", "write K/N with whole numbers"),
        ("", "write K/N with whole numbers"),
    ],
)
def test_bad_shard_names_the_problem(text, problem):
    with pytest.raises(ShardSpecError, match="--rankgate-shard") as caught:
        parse_shard(text)
    assert problem in str(caught.value)


def _ids(count: int) -> list[str]:
    return [f"suites/x/test_{i % 7}.py::test_case[{i}]" for i in range(count)]


@pytest.mark.parametrize("shards", [1, 2, 3, 5])
def test_every_test_lands_in_exactly_one_shard(shards):
    ids = _ids(40)
    rng = random.Random(shards)
    durations = {n: rng.uniform(0.01, 3.0) for n in ids[:30]}  # 10 unknown
    result = split(ids, durations, shards)
    members = [result.members(k) for k in range(1, shards + 1)]
    flat = sorted(i for m in members for i in m)
    assert flat == list(range(len(ids)))
    assert [len(m) for m in members] == list(result.counts)


@pytest.mark.parametrize("seed", range(5))
def test_predicted_times_within_ten_percent_when_no_test_dominates(seed):
    rng = random.Random(seed)
    ids = _ids(60)
    durations = {n: rng.uniform(0.05, 4.0) for n in ids}
    for shards in (2, 3, 4):
        result = split(ids, durations, shards)
        assert result.imbalance <= 0.10, (shards, result.predicted_s)
        predicted = [
            sum(durations[ids[i]] for i in result.members(k)) for k in range(1, shards + 1)
        ]
        assert predicted == pytest.approx(list(result.predicted_s))


def test_a_test_longer_than_all_others_gets_a_shard_of_its_own():
    ids = ["t::long", "t::a", "t::b", "t::c"]
    result = split(ids, {"t::long": 10.0, "t::a": 1.0, "t::b": 1.0, "t::c": 1.0}, 2)
    assert result.members(1) == [0]
    assert result.members(2) == [1, 2, 3]
    assert result.predicted_s == (10.0, 3.0)


def test_the_same_tests_in_any_order_land_in_the_same_shards():
    ids = _ids(30)
    rng = random.Random(7)
    durations = {n: rng.choice([0.5, 1.0, 1.0, 2.0]) for n in ids}  # many ties
    first = split(ids, durations, 3)
    where = {ids[i]: s for i, s in enumerate(first.shard_of)}
    for attempt in range(5):
        shuffled = ids[:]
        random.Random(attempt).shuffle(shuffled)
        again = split(shuffled, durations, 3)
        assert {shuffled[i]: s for i, s in enumerate(again.shard_of)} == where


def test_unknown_tests_count_at_the_mean_of_the_known_ones():
    ids = ["t::a", "t::b", "t::new1", "t::new2"]
    result = split(ids, {"t::a": 1.0, "t::b": 3.0, "t::gone": 100.0}, 2)
    assert result.unknown == 2
    assert result.fallback_s == 2.0
    assert sorted(result.predicted_s) == [4.0, 4.0]


def test_no_stored_times_spreads_tests_by_count():
    result = split(_ids(7), {}, 3)
    assert sorted(result.counts) == [2, 2, 3]
    zero = split(_ids(6), dict.fromkeys(_ids(6), 0.0), 3)
    assert zero.counts == (2, 2, 2)


def test_more_shards_than_tests_leaves_shards_empty():
    result = split(["t::a"], {}, 3)
    assert result.counts == (1, 0, 0)
    assert result.members(2) == result.members(3) == []


def test_store_merges_into_what_the_file_holds(tmp_path):
    path = tmp_path / "sub" / "durations.json"
    store_durations(path, {"t::a": 1.0, "t::b": 2.0})
    store_durations(path, {"t::b": 5.0, "t::c": 0.25})
    assert read_durations(path) == {"t::a": 1.0, "t::b": 5.0, "t::c": 0.25}
    assert [p.name for p in path.parent.iterdir() if not p.name.endswith(".lock")] == [path.name]
    assert path.stat().st_mode & 0o777 == 0o644  # others on the cluster read it too
    path.chmod(0o640)
    store_durations(path, {"t::d": 1.0})
    assert path.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[1, 2]", "holds a list; expected a JSON object"),
        ('{"t::a": "1.0"}', "'t::a' has '1.0'; each value must be a number of seconds >= 0"),
        ('{"t::a": -1}', "'t::a' has -1"),
        ('{"t::a": true}', "'t::a' has True"),
        ('{"t::a": NaN}', "'t::a' has nan"),
        ("{", "is not JSON"),
    ],
)
def test_bad_durations_file_names_the_problem(tmp_path, text, problem):
    path = tmp_path / "d.json"
    path.write_text(text)
    with pytest.raises(DurationsError) as caught:
        read_durations(path)
    assert str(path) in str(caught.value)
    assert problem in str(caught.value)


def test_missing_durations_file_says_how_to_make_one(tmp_path):
    with pytest.raises(DurationsError, match="does not exist; write one first with"):
        read_durations(tmp_path / "none.json")


def test_store_refuses_to_merge_into_a_file_it_cannot_read(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"t::a": "x"}))
    with pytest.raises(DurationsError):
        store_durations(path, {"t::b": 1.0})
    assert json.loads(path.read_text()) == {"t::a": "x"}
