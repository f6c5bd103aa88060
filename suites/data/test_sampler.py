"""InfiniteSampler: deterministic, infinite, the same permutation everywhere, disjoint shards."""

from __future__ import annotations

import itertools

import pytest
import torch.distributed as dist

from rankgate.workloads.data import InfiniteSampler


@pytest.mark.unit
def test_each_epoch_is_a_permutation_and_epochs_differ():
    sampler = InfiniteSampler(10, seed=3)
    first, second = sampler.take(10), sampler.take(10)
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second
    assert first == InfiniteSampler(10, seed=3).take(10)
    assert first != InfiniteSampler(10, seed=4).take(10)


@pytest.mark.unit
def test_it_never_ends_and_resumes_where_it_stopped():
    sampler = InfiniteSampler(3, seed=0, rank=1, world_size=2)
    assert len(list(itertools.islice(sampler, 100))) == 100
    state = sampler.state_dict()
    expected = sampler.take(7)
    resumed = InfiniteSampler(3, seed=0, rank=1, world_size=2)
    resumed.load_state_dict(state)
    assert resumed.take(7) == expected


@pytest.mark.unit
def test_resuming_with_another_world_is_refused():
    state = InfiniteSampler(4, seed=0, world_size=2).state_dict()
    with pytest.raises(ValueError, match="world size 2, this sampler has seed 0 and world size 4"):
        InfiniteSampler(4, seed=0, world_size=4).load_state_dict(state)


@pytest.mark.unit
@pytest.mark.parametrize(("num_samples", "world"), [(12, 3), (10, 4), (3, 4)])
def test_shards_are_disjoint_and_cover_each_epoch(num_samples, world):
    # Over world_size epochs every rank's shard has num_samples entries; together the
    # shards are each epoch's permutation, dealt out round-robin.
    samplers = [InfiniteSampler(num_samples, seed=5, rank=r, world_size=world) for r in range(world)]
    shards = [s.take(num_samples) for s in samplers]
    reference = InfiniteSampler(num_samples, seed=5)
    stream = [reference.index_at(p) for p in range(num_samples * world)]
    for r, shard in enumerate(shards):
        assert shard == stream[r::world]


@pytest.mark.unit
def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="num_samples must be >= 1, got 0"):
        InfiniteSampler(0)
    with pytest.raises(ValueError, match=r"rank 2 is outside 0\.\.1"):
        InfiniteSampler(4, rank=2, world_size=2)


@pytest.mark.world(2)
def test_ranks_agree_on_the_permutation_and_their_shards_are_disjoint(rank, world_size):
    sampler = InfiniteSampler(9, seed=11, rank=rank, world_size=world_size)
    mine = sampler.take(9)
    everyone = [None] * world_size
    dist.all_gather_object(everyone, (sampler.permutation(0), sampler.permutation(1), mine))
    assert everyone[0][:2] == everyone[1][:2]
    # The first epoch is dealt out round-robin: 5 to rank 0, 4 to rank 1, no overlap.
    epoch0 = everyone[0][0]
    assert everyone[0][2][:5] == epoch0[0::2] and everyone[1][2][:4] == epoch0[1::2]
    assert not set(everyone[0][2][:5]) & set(everyone[1][2][:4])
