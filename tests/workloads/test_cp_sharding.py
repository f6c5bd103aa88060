"""Dual-chunk sharding, padding and packing: coverage, disjointness, round trips, errors."""

from __future__ import annotations

import pytest
import torch

from rankgate.workloads.cp import (
    IGNORE_INDEX,
    DualChunkSharding,
    next_token_labels,
    pack_sequences,
    pad_to_multiple,
    padded_length,
)

pytestmark = pytest.mark.unit

SHARDINGS = [
    pytest.param(lambda cp: DualChunkSharding.bshd(48, cp), id="bshd48"),
    pytest.param(lambda cp: DualChunkSharding.thd([0, 24, 72, 96], cp), id="thd24-48-24"),
]


@pytest.mark.parametrize("make", SHARDINGS)
@pytest.mark.parametrize("cp", [1, 2, 3, 4])
def test_every_token_once_and_ranks_disjoint(make, cp):
    sharding = make(cp)
    per_rank = [sharding.indices(r).tolist() for r in range(cp)]
    assert all(len(ix) == sharding.local_total for ix in per_rank)
    flat = [i for ix in per_rank for i in ix]
    assert sorted(flat) == list(range(sharding.total))  # every token exactly once
    for a in range(cp):
        for b in range(a + 1, cp):
            assert not set(per_rank[a]) & set(per_rank[b])


@pytest.mark.parametrize("make", SHARDINGS)
@pytest.mark.parametrize("cp", [1, 2, 4])
def test_round_trip_on_any_dim(make, cp):
    sharding = make(cp)
    x = torch.randn(3, sharding.total, 5)
    for dim, t in ((1, x), (0, x.transpose(0, 1).contiguous()), (-2, x)):
        shards = [sharding.shard(t, r, dim=dim) for r in range(cp)]
        assert torch.equal(sharding.unshard(shards, dim=dim), t)


def test_rank_holds_chunk_r_and_its_mirror():
    # 16 tokens, cp=2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
    sharding = DualChunkSharding.bshd(16, 2)
    assert sharding.indices(0).tolist() == [0, 1, 2, 3, 12, 13, 14, 15]
    assert sharding.indices(1).tolist() == [4, 5, 6, 7, 8, 9, 10, 11]


def test_thd_shards_each_sequence_and_positions_restart():
    sharding = DualChunkSharding.thd(torch.tensor([0, 8, 20]), 2)
    assert sharding.indices(0).tolist() == [0, 1, 6, 7, 8, 9, 10, 17, 18, 19]
    assert sharding.positions(0).tolist() == [0, 1, 6, 7, 0, 1, 2, 9, 10, 11]
    assert sharding.local_cu_seqlens == (0, 4, 10)


def test_local_order_within_a_sequence_is_increasing():
    # causal masking by local index must equal causal masking by global position
    sharding = DualChunkSharding.thd([0, 16, 40], 4)
    for r in range(4):
        pos = sharding.positions(r)
        for a, b in zip(sharding.local_cu_seqlens, sharding.local_cu_seqlens[1:]):
            assert torch.all(pos[a + 1 : b] > pos[a : b - 1])


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: DualChunkSharding.bshd(30, 2), "30 is not a positive multiple of 2\\*cp=4: pad it first"),
        (lambda: DualChunkSharding.bshd(8, 0), "cp=0 must be an integer >= 1"),
        (lambda: DualChunkSharding.thd([0, 8, 14], 2), "sequence 1 has 6 tokens .* not a multiple of 2\\*cp=4: pack with"),
        (lambda: DualChunkSharding.thd([1, 8], 2), "must start at 0"),
        (lambda: DualChunkSharding.thd([0, 8, 8, 12], 2), "must increase strictly: cu_seqlens\\[1\\]=8, cu_seqlens\\[2\\]=8"),
        (lambda: DualChunkSharding.thd(torch.tensor([[0, 4]]), 2), "1-D integer tensor"),
        (lambda: DualChunkSharding.thd(torch.tensor([0.0, 4.0]), 2), "1-D integer tensor"),
    ],
)
def test_bad_divisibility_and_bad_cu_seqlens_are_refused(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_shard_and_unshard_refuse_wrong_extents_and_ranks():
    sharding = DualChunkSharding.thd([0, 8, 16], 2)
    with pytest.raises(ValueError, match="has 12 tokens along dim 0 but cu_seqlens ends at 16"):
        sharding.shard(torch.zeros(12), 0, dim=0)
    with pytest.raises(ValueError, match=r"rank 2 is outside 0\.\.1"):
        sharding.indices(2)
    with pytest.raises(ValueError, match="one shard per rank: got 1, cp=2"):
        sharding.unshard([torch.zeros(8)], dim=0)
    with pytest.raises(ValueError, match="shard of rank 1 has 7 tokens"):
        sharding.unshard([torch.zeros(8), torch.zeros(7)], dim=0)


def test_padding_to_multiples_of_two_cp():
    assert [padded_length(n, 2) for n in (1, 4, 5, 8)] == [4, 4, 8, 8]
    x = torch.arange(6).view(1, 6)
    padded = pad_to_multiple(x, 4, dim=1, value=-1)
    assert padded.tolist() == [[0, 1, 2, 3, 4, 5, -1, -1]]
    assert pad_to_multiple(padded, 4) is padded


def test_pack_sequences_pads_each_and_labels_within_sequences():
    packed = pack_sequences([torch.tensor([5, 6, 7]), torch.tensor([1, 2, 3, 4, 9])], cp=1, pad_id=0)
    assert packed.cu_seqlens.tolist() == [0, 4, 10]
    assert packed.tokens.tolist() == [5, 6, 7, 0, 1, 2, 3, 4, 9, 0]
    i = IGNORE_INDEX
    assert packed.labels.tolist() == [6, 7, i, i, 2, 3, 4, 9, i, i]
    assert packed.positions.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5]
    assert packed.lengths == (3, 5)
    assert DualChunkSharding.thd(packed.cu_seqlens, 1).local_cu_seqlens == (0, 4, 10)
    with pytest.raises(ValueError, match="sequence 1 has 6 tokens"):
        DualChunkSharding.thd(packed.cu_seqlens, 2)  # packed for cp=1, not for cp=2
    with pytest.raises(ValueError, match="pass non-empty 1-D token tensors"):
        pack_sequences([torch.tensor([], dtype=torch.long)], cp=2)


def test_next_token_labels_ignore_the_last_real_token_and_padding():
    tokens = torch.tensor([[1, 2, 3, 4], [5, 6, 0, 0]])
    labels = next_token_labels(tokens, torch.tensor([4, 2]))
    i = IGNORE_INDEX
    assert labels.tolist() == [[2, 3, 4, i], [6, i, i, i]]
