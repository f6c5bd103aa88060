"""The training suite's launcher gate: a strategy test under a launcher its markers do not
allow is skipped with the launchers that work (rankgate.launch.markers), never run into a hang."""

from __future__ import annotations

import pytest

from rankgate.launch.markers import current_launcher, launcher_skip_reason


def pytest_runtest_setup(item: pytest.Item) -> None:
    reason = launcher_skip_reason((m.name for m in item.iter_markers()), current_launcher())
    if reason:
        pytest.skip(reason)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny models gain nothing from a second intra-op thread; on 2 busy cores it made a
    single-process training test 10x slower (14.5 s against 1.4 s)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
