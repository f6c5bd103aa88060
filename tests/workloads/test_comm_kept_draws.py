"""KeptDraws: the comm sweep's inputs, each large draw made once per rank process."""

from __future__ import annotations

import pytest
import torch

from rankgate.workloads.comm import reference
from rankgate.workloads.comm.reference import DTYPES, KeptDraws, rank_input

pytestmark = pytest.mark.unit


@pytest.fixture
def draws(monkeypatch) -> list[tuple[int, int, int]]:
    """(seed, rank, numel) of every int draw made from here on."""
    made: list[tuple[int, int, int]] = []
    real = reference.int_draw

    def counted(rank: int, numel: int, *, seed: int) -> torch.Tensor:
        made.append((seed, rank, numel))
        return real(rank, numel, seed=seed)

    monkeypatch.setattr(reference, "int_draw", counted)
    return made


def test_a_kept_input_is_rank_input_in_every_dtype(draws):
    kept = KeptDraws(min_numel=64, max_bytes=4096)
    got = {(name, rank): kept.rank_input(rank, 100, dtype, seed=7)
           for name, dtype in DTYPES.items() for rank in (0, 1)}  # fmt: skip
    assert draws == [(7, 0, 100), (7, 1, 100)]  # one draw per rank for all four dtypes
    for (name, rank), tensor in got.items():
        assert tensor.dtype == DTYPES[name]
        assert torch.equal(tensor, rank_input(rank, 100, DTYPES[name], seed=7)), (name, rank)


def test_each_call_gives_a_tensor_of_its_own(draws):
    kept = KeptDraws(min_numel=64, max_bytes=4096)
    first = kept.rank_input(0, 100, torch.int32, seed=3)
    first.fill_(99)  # an in-place collective on the input
    again = kept.rank_input(0, 100, torch.int32, seed=3)
    assert torch.equal(again, rank_input(0, 100, torch.int32, seed=3))
    assert draws == [(3, 0, 100), (3, 0, 100)]  # the second from rank_input above


def test_small_draws_are_not_kept(draws):
    kept = KeptDraws(min_numel=64, max_bytes=4096)
    kept.rank_input(0, 63, torch.float32, seed=1)
    kept.rank_input(0, 63, torch.float32, seed=1)
    assert draws == [(1, 0, 63), (1, 0, 63)]


def test_past_max_bytes_the_least_recently_used_draw_goes(draws):
    kept = KeptDraws(min_numel=10, max_bytes=250)
    for seed in (1, 2):  # 200 bytes kept
        kept.rank_input(0, 100, torch.float16, seed=seed)
    kept.rank_input(0, 100, torch.float16, seed=1)  # seed 1 used last: seed 2 is older
    kept.rank_input(0, 100, torch.float16, seed=3)  # 300 bytes: seed 2 goes
    kept.rank_input(0, 100, torch.float16, seed=1)
    kept.rank_input(0, 100, torch.float16, seed=2)
    assert draws == [(1, 0, 100), (2, 0, 100), (3, 0, 100), (2, 0, 100)]


def test_a_draw_larger_than_max_bytes_is_never_kept(draws):
    kept = KeptDraws(min_numel=10, max_bytes=50)
    for _ in range(2):
        kept.rank_input(0, 51, torch.float32, seed=4)
    assert draws == [(4, 0, 51), (4, 0, 51)]
