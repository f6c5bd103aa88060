"""pytest-randomly beside the pool (docs/plugins.md): it shuffles the controller's order
and reseeds the controller; each rank is seeded with rankgate's seed of the test, so
the ranks draw the same numbers whatever order pytest-randomly chose. (In place:
test_inplace.py's pytest-randomly test; the project's own runs block the plugin.)"""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_randomly")

pytestmark = [pytest.mark.dist, pytest.mark.launches]

SOURCE = """
import random
import pytest
import torch
import torch.distributed as dist

@pytest.mark.world(2, backend="gloo")
@pytest.mark.parametrize("i", range(3))
def test_same_draw_on_every_rank(i, rank):
    drawn = torch.tensor([float(random.random()), float(torch.rand(1))])
    gathered = [torch.zeros(2) for _ in range(2)]
    dist.all_gather(gathered, drawn)
    assert torch.equal(gathered[0], gathered[1])
"""


def test_pytest_randomly_in_the_pool(inner):
    # A process of its own: pytest-randomly loaded into this one (in-process) left it so
    # that Ray Train, in a later test of the same xdist worker, could no longer serialize
    # its training loop ("Could not serialize the put value <function _worker_loop>").
    result = inner(SOURCE, "-p", "randomly", subprocess=True)  # blocked in our addopts
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["Using --randomly-seed=*"])
