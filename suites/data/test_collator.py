"""MaxTokensPerRankCollator: cap, dropped samples, dummies, positions, loss-token counts."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from rankgate.workloads.data import IGNORE_INDEX, MaxTokensPerRankCollator, Sample


def _sample(n: int, start: int = 1, labels=None) -> Sample:
    ids = tuple(range(start, start + n))
    return Sample(ids, ids if labels is None else tuple(labels))


@pytest.mark.unit
def test_one_rank_packs_everything_with_restarting_positions():
    batch = [_sample(3, 10), _sample(2, 20)]
    out = MaxTokensPerRankCollator(8, rank=0, world_size=1)(batch)
    (mb,) = out.minibatches
    assert mb.input_ids.tolist() == [[10, 11, 12, 20, 21]]
    # Shifted within each sample: the last token of a sample predicts nothing.
    assert mb.labels.tolist() == [[11, 12, IGNORE_INDEX, 21, IGNORE_INDEX]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 0, 1]]
    assert mb.document_ids.tolist() == [[0, 0, 0, 1, 1]]
    assert mb.loss_tokens == out.loss_tokens == 3
    assert (out.dropped, out.samples) == (0, 2)


@pytest.mark.unit
def test_masked_labels_are_not_counted():
    batch = [_sample(4, 1, labels=[-100, -100, 3, 4])]
    (mb,) = MaxTokensPerRankCollator(8, rank=0, world_size=1)(batch).minibatches
    assert mb.labels.tolist() == [[IGNORE_INDEX, 3, 4, IGNORE_INDEX]]
    assert mb.loss_tokens == 2


@pytest.mark.unit
def test_oversize_samples_are_dropped_and_counted():
    batch = [_sample(9), _sample(4), _sample(12)]
    out = MaxTokensPerRankCollator(8, rank=0, world_size=1)(batch)
    assert (out.dropped, out.samples, out.loss_tokens) == (2, 1, 3)
    assert [mb.input_ids.shape[1] for mb in out.minibatches] == [4]


@pytest.mark.unit
def test_an_empty_rank_gets_a_dummy_whose_label_is_ignored():
    # One sample, two ranks: rank 1 has nothing but must still run the minibatch.
    rank1 = MaxTokensPerRankCollator(8, rank=1, world_size=2)([_sample(5)])
    (mb,) = rank1.minibatches
    assert mb.is_dummy and mb.loss_tokens == 0
    assert mb.labels.tolist() == [[IGNORE_INDEX]]
    assert rank1.loss_tokens == 4  # the global batch's targets, not this rank's


@pytest.mark.unit
def test_every_rank_has_the_same_number_of_minibatches_within_the_cap():
    lengths = [7, 1, 3, 8, 2, 2, 5, 6, 1, 4]
    batch = [_sample(n, 10 * i) for i, n in enumerate(lengths)]
    outs = [MaxTokensPerRankCollator(8, rank=r, world_size=3)(batch) for r in range(3)]
    assert len({len(o.minibatches) for o in outs}) == 1
    seen = [i for o in outs for mb in o.minibatches for i in mb.sample_indices]
    assert sorted(seen) == list(range(len(lengths)))
    assert all(mb.input_ids.shape[1] <= 8 for o in outs for mb in o.minibatches)
    assert {o.loss_tokens for o in outs} == {sum(lengths) - len(lengths)}
    total = sum(mb.loss_tokens for o in outs for mb in o.minibatches)
    assert total == outs[0].loss_tokens


@pytest.mark.unit
def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="max_tokens_per_rank must be >= 1, got 0"):
        MaxTokensPerRankCollator(0, rank=0, world_size=1)
    with pytest.raises(ValueError, match=r"rank 3 is outside 0\.\.1"):
        MaxTokensPerRankCollator(8, rank=3, world_size=2)


@pytest.mark.world(2)
def test_ranks_split_one_global_batch_and_agree_on_its_loss_tokens(rank, world_size):
    g = torch.Generator().manual_seed(0)
    lengths = [*torch.randint(1, 30, (25,), generator=g).tolist(), 33, 50]
    batch = [_sample(n, 100 * i) for i, n in enumerate(lengths)]
    out = MaxTokensPerRankCollator(32, rank=rank, world_size=world_size)(batch)
    local = torch.tensor([sum(mb.loss_tokens for mb in out.minibatches)])
    dist.all_reduce(local)
    assert local.item() == out.loss_tokens  # normaliser = the sum over ranks
    everyone = [None] * world_size
    dist.all_gather_object(
        everyone, (len(out.minibatches), [i for mb in out.minibatches for i in mb.sample_indices])
    )
    assert everyone[0][0] == everyone[1][0]
    assert not set(everyone[0][1]) & set(everyone[1][1])
    kept = [i for i, n in enumerate(lengths) if n <= 32]
    assert sorted(everyone[0][1] + everyone[1][1]) == kept
    assert out.dropped == len(lengths) - len(kept) > 0
