import pytest

from rankgate.harness.gpus import gpu_share, xdist_slot

pytestmark = pytest.mark.unit


def test_xdist_slot():
    assert xdist_slot({}) == (0, 1)
    assert xdist_slot({"PYTEST_XDIST_WORKER": "gw3", "PYTEST_XDIST_WORKER_COUNT": "4"}) == (3, 4)


@pytest.mark.parametrize(
    ("total", "slot", "slots", "share"),
    [
        (8, 0, 1, tuple(range(8))),
        (8, 1, 2, (4, 5, 6, 7)),
        (8, 2, 3, (4, 5)),
        (2, 3, 4, ()),
        (0, 0, 1, ()),
    ],
)
def test_gpu_share_is_disjoint_blocks(total, slot, slots, share):
    assert gpu_share(total, slot, slots) == share


def test_every_worker_gets_a_disjoint_share():
    shares = [set(gpu_share(8, s, 4)) for s in range(4)]
    assert set().union(*shares) == set(range(8))
    assert sum(len(s) for s in shares) == 8
