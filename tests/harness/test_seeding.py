"""Each test's seed on a rank: the same draws every time, at no per-test stack formatting."""

from __future__ import annotations

import random
import traceback

import pytest
import torch

from rankgate.harness.rankstate import seed_everything

pytestmark = pytest.mark.unit


def test_the_same_seed_gives_the_same_draws():
    seed_everything(1234)
    first = (random.random(), torch.rand(3).tolist())
    seed_everything(1234)
    assert (random.random(), torch.rand(3).tolist()) == first
    seed_everything(1235)
    assert torch.rand(3).tolist() != first[1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_draws_are_seeded_too():
    seed_everything(99)
    first = torch.rand(3, device="cuda").tolist()
    seed_everything(99)
    assert torch.rand(3, device="cuda").tolist() == first


def test_seeding_formats_no_stack(monkeypatch):
    """torch.manual_seed queues its call with a formatted stack for every accelerator
    torch knows but has not started (XPU, MTIA, CUDA on a CPU rank): 0.3-0.8 ms per test
    on each rank, measured in a pool's profile."""
    if torch.cuda.is_available() and not torch.cuda.is_initialized():
        torch.cuda.init()  # CUDA's own lazy seed may format one; this host started it

    def no_stack(*args, **kwargs):
        raise AssertionError("seed_everything formatted a stack")

    monkeypatch.setattr(traceback, "format_stack", no_stack)
    seed_everything(7)
