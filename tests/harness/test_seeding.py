"""Each test's seed on a rank: the same draws every time, at no per-test stack formatting."""

from __future__ import annotations

import random
import subprocess
import sys
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


ASKED_ONCE = """
import torch
from rankgate.harness import rankstate

asked = []
real = torch.cuda.is_available
torch.cuda.is_available = lambda: asked.append(1) or real()
rankstate.accelerators()  # what a pool rank does as it starts
for seed in range(3):
    rankstate.seed_everything(seed)
print(len(asked), rankstate.accelerators() is rankstate.accelerators())
"""


def test_whether_cuda_exists_is_asked_once_per_process():
    # The first is_available() starts the driver (seconds on a busy GPU host): a rank
    # asks as it starts, and no test's seeding asks again inside its timeout.
    out = subprocess.run(
        [sys.executable, "-c", ASKED_ONCE], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.split() == ["1", "True"]
