"""``rank``, ``world_size`` and ``device`` read the test whose run is under way, not
``request`` (rankgate.harness.plugin): a pytest session run inside a test stacks its own
tests on the outer one and leaves it as it was."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.dist  # the inner session starts a pool of two ranks


def test_after_an_inner_world_test_the_outer_test_reads_its_own_values(inner, request):
    result = inner(
        """
        import pytest
        import torch

        def test_plain(rank, world_size, device):
            expected = "cuda" if torch.cuda.is_available() else "cpu"
            assert (rank, world_size, device.type) == (0, 1, expected)

        @pytest.mark.world(2)
        def test_in_the_pool(rank, world_size, device):
            assert world_size == 2 and rank in (0, 1) and isinstance(device, torch.device)
        """
    )
    result.assert_outcomes(passed=2)
    # Requested only now: the inner session's last test, world(2), must not be what they read.
    values = [request.getfixturevalue(name) for name in ("rank", "world_size", "device")]
    expected = "cuda" if torch.cuda.is_available() else "cpu"  # a plain test's device
    assert [values[0], values[1], values[2].type] == [0, 1, expected]
