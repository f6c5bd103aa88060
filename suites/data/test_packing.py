"""Packing: the invariants of every packing (hypothesis), the metrics, and LPT's advantage."""

from __future__ import annotations

import pytest

# hypothesis comes with the dev extra; a GPU host without it collects the rest of suites/
pytest.importorskip("hypothesis")
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate.workloads.packing import (
    ALGORITHMS,
    PADDING,
    Packing,
    PackingError,
    measure,
    metrics_of,
    pack,
    sample_lengths,
)

pytestmark = pytest.mark.unit


@st.composite
def problems(draw):
    """A cap, a world size and lengths that fit under the cap."""
    cap = draw(st.integers(min_value=1, max_value=256))
    world = draw(st.integers(min_value=1, max_value=8))
    lengths = draw(st.lists(st.integers(min_value=1, max_value=cap), max_size=80))
    return lengths, cap, world


def _check_invariants(packing: Packing, lengths: list[int], cap: int, world: int) -> None:
    seen = []
    for minibatch in packing.minibatches:
        assert len(minibatch) == world  # every rank has a slot in every minibatch
        for slot in minibatch:
            assert slot, "a slot is never empty: it holds samples or the padding mark"
            if PADDING in slot:
                assert slot == (PADDING,), f"padding mixed with samples: {slot}"
                continue
            assert sum(lengths[i] for i in slot) <= cap
            seen.extend(slot)
    assert sorted(seen) == list(range(len(lengths)))  # each index exactly once
    # A minibatch with nothing in it would be a wasted step.
    assert all(any(slot != (PADDING,) for slot in mb) for mb in packing.minibatches)
    counts = {len(packing.for_rank(r)) for r in range(world)}
    assert counts == {len(packing.minibatches)}


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@settings(max_examples=150, deadline=None)
@given(problem=problems())
def test_every_packing_keeps_the_invariants(algorithm, problem):
    lengths, cap, world = problem
    _check_invariants(pack(lengths, cap, world, algorithm), lengths, cap, world)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@settings(max_examples=100, deadline=None)
@given(problem=problems())
def test_loads_and_metrics_agree_with_the_slots(algorithm, problem):
    lengths, cap, world = problem
    packing = pack(lengths, cap, world, algorithm)
    loads = packing.loads()
    metrics = metrics_of(packing, algorithm)
    assert metrics.minibatches == len(packing.minibatches)
    assert sum(map(sum, loads)) == sum(lengths)
    if lengths:
        assert metrics.efficiency == pytest.approx(sum(lengths) / (len(loads) * world * cap))
        assert 0 < metrics.efficiency <= 1
        assert 0 <= metrics.balance <= 1
    # No algorithm can beat the token bound.
    assert metrics.minibatches >= -(-sum(lengths) // (world * cap))


def test_greedy_fills_ranks_in_order_and_marks_padding():
    packing = pack([3, 3, 3, 5, 1], 6, 2, "greedy")
    assert packing.minibatches == (((0, 1), (2,)), ((3, 4), (PADDING,)))
    assert packing.for_rank(1) == [(2,), (PADDING,)]
    assert packing.loads() == [[6, 3], [6, 0]]


def test_lpt_places_the_longest_first_on_the_least_loaded_rank():
    packing = pack([3, 3, 3, 5, 1], 6, 2, "lpt")
    # 5 -> rank 0, 3 -> rank 1, 3 -> rank 1 (6), 3 -> new minibatch, 1 -> rank 0 (6).
    assert packing.minibatches == (((3, 4), (0, 1)), ((2,), (PADDING,)))


def test_no_samples_no_minibatches():
    for algorithm in ALGORITHMS:
        packing = pack([], 8, 4, algorithm)
        assert packing.minibatches == ()
        assert metrics_of(packing, algorithm).minibatches == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([9], 8, 2), "sample 0 has 9 tokens, more than max_tokens_per_rank=8; drop or truncate"),
        (([1, 0], 8, 2), "sample 1 has length 0; drop empty samples first"),
        (([1], 0, 2), "max_tokens_per_rank must be >= 1, got 0"),
        (([1], 8, 0), "world_size must be >= 1, got 0"),
    ],
)
def test_bad_input_is_refused_with_the_fix(args, message):
    for algorithm in ALGORITHMS:
        with pytest.raises(PackingError, match=message.replace("(", r"\(")):
            pack(*args, algorithm=algorithm)


def test_unknown_algorithm_names_the_known_ones():
    with pytest.raises(PackingError, match="unknown packing algorithm 'first_fit'; use one of greedy, lpt"):
        pack([1], 8, 2, "first_fit")


def test_for_rank_outside_the_world_is_refused():
    with pytest.raises(PackingError, match=r"rank 2 is outside 0\.\.1"):
        pack([1, 2], 8, 2).for_rank(2)


@pytest.mark.parametrize("distribution", ["bimodal", "power_law", "outlier_heavy"])
def test_lpt_beats_greedy(distribution):
    # Global batches of 1024 sequences over 8 ranks of 8K tokens each, five seeds.
    greedy, lpt = [], []
    for seed in range(5):
        lengths = sample_lengths(distribution, 1024, 8192, seed)
        greedy.append(measure("greedy", lengths, 8192, 8, repeats=1))
        lpt.append(measure("lpt", lengths, 8192, 8, repeats=1))
    for g, p in zip(greedy, lpt):
        # Never more steps, and ranks nearly even where greedy leaves them at 0.26-0.69.
        assert p.minibatches <= g.minibatches, (g, p)
        assert p.balance > 0.95 and p.balance > g.balance + 0.25, (g, p)
    # Fewer steps overall (ties happen when a power-law batch needs only 5-6 minibatches).
    assert sum(p.minibatches for p in lpt) < sum(g.minibatches for g in greedy)
    assert sum(p.efficiency for p in lpt) > sum(g.efficiency for g in greedy)


def test_distributions_are_seeded_and_within_the_cap():
    for name in ("uniform", "bimodal", "power_law", "outlier_heavy"):
        a = sample_lengths(name, 300, 1000, seed=1)
        assert a == sample_lengths(name, 300, 1000, seed=1)
        assert a != sample_lengths(name, 300, 1000, seed=2)
        assert all(1 <= x <= 1000 for x in a)
    with pytest.raises(ValueError, match="unknown distribution 'zipf'; use one of uniform, bimodal"):
        sample_lengths("zipf", 1, 10)
