"""Markers used where they cannot work say so in one clear line: a world size list on a
plain test, ``every_rank`` without a launcher."""

from __future__ import annotations

import pytest

from rankgate.harness.item_settings import EVERY_RANK_WITHOUT_LAUNCHER

pytestmark = pytest.mark.dist


def test_a_list_of_sizes_says_lists_are_for_adopted_classes(inner):
    result = inner(
        """
        import pytest

        @pytest.mark.world([1, 2])
        def test_list(rank):
            pass
        """
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert (
        "test_inner.py::test_list: invalid @pytest.mark.world: world size must be an integer, "
        "got the list [1, 2]: a list of sizes is read only from adopted test classes "
        "(rankgate_world_classes, docs/adopting.md). Run a test at several sizes with one "
        'marker per size: @pytest.mark.parametrize("size", [pytest.param(1, '
        "marks=pytest.mark.world(1)), pytest.param(2, marks=pytest.mark.world(2))])"
    ) in out.splitlines()
    # pytest's own stop for a collection error is no signal, and no test is "not run"
    assert "received SIGINT" not in out
    assert "interrupted:" not in out
    assert "!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!" in out


def test_the_suggested_parametrization_runs_each_size(inner):
    result = inner(
        """
        import pytest
        import torch.distributed as dist

        @pytest.mark.parametrize(
            "size",
            [pytest.param(1, marks=pytest.mark.world(1)), pytest.param(2, marks=pytest.mark.world(2))],
        )
        def test_sizes(rank, size):
            assert dist.get_world_size() == size
        """
    )
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["pool", "xdist"])
def test_every_rank_without_a_launcher_is_skipped_saying_why(inner, workers):
    result = inner(
        """
        import pytest
        import torch.distributed as dist

        @pytest.mark.every_rank
        def test_every(rank):
            assert dist.get_world_size() >= 1
        """,
        *workers,
        subprocess=bool(workers),
    )
    result.assert_outcomes(skipped=1)
    assert f"SKIPPED [1] test_inner.py:4: {EVERY_RANK_WITHOUT_LAUNCHER}" in result.stdout.lines
