import pytest

from rankgate.harness.pool.gpus import gpu_block, xdist_slot

pytestmark = pytest.mark.unit


def test_xdist_slot():
    assert xdist_slot({}) == (0, 1)
    assert xdist_slot({"PYTEST_XDIST_WORKER": "gw3", "PYTEST_XDIST_WORKER_COUNT": "4"}) == (3, 4)


@pytest.mark.parametrize(
    ("total", "world", "slot", "block"),
    [
        pytest.param(4, 2, 0, (0, 1), id="4gpus-world2-worker0"),
        pytest.param(4, 2, 1, (2, 3), id="4gpus-world2-worker1"),
        pytest.param(4, 2, 2, (0, 1), id="4gpus-world2-worker2-wraps"),
        pytest.param(2, 2, 1, (0, 1), id="2gpus-world2-worker1-shares"),
        pytest.param(2, 1, 1, (1,), id="2gpus-world1-worker1"),
        pytest.param(3, 2, 1, (2, 0), id="3gpus-world2-worker1-wraps"),
        pytest.param(8, 8, 5, tuple(range(8)), id="8gpus-world8"),
        pytest.param(2, 4, 0, (), id="too-few"),
    ],
)
def test_each_worker_has_a_block_of_the_machines_gpus(total, world, slot, block):
    assert gpu_block(total, world, slot) == block


def test_two_workers_on_four_gpus_put_world_2_on_disjoint_pairs():
    pairs = [set(gpu_block(4, 2, slot)) for slot in range(2)]
    assert pairs[0].isdisjoint(pairs[1]) and pairs[0] | pairs[1] == {0, 1, 2, 3}
