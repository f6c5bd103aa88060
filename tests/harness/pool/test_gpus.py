import os
import subprocess
import sys

import pytest

from rankgate.harness.pool.gpus import GPU_DRIVER_NODES, gpu_block, xdist_slot
from rankgate.harness.pool.pool import threads_per_rank

pytestmark = pytest.mark.unit


def test_xdist_slot():
    assert xdist_slot({}) == (0, 1)
    assert xdist_slot({"PYTEST_XDIST_WORKER": "gw3", "PYTEST_XDIST_WORKER_COUNT": "4"}) == (3, 4)


@pytest.mark.parametrize(
    ("total", "world", "slot", "workers", "block"),
    [
        pytest.param(4, 2, 0, 2, (0, 1), id="4gpus-world2-worker0"),
        pytest.param(4, 2, 1, 2, (2, 3), id="4gpus-world2-worker1"),
        pytest.param(4, 2, 2, 3, (0, 1), id="4gpus-world2-worker2-wraps"),
        pytest.param(4, 1, 1, 2, (2,), id="4gpus-world1-worker1-in-its-region"),
        pytest.param(2, 2, 1, 2, (0, 1), id="2gpus-world2-worker1-shares"),
        pytest.param(2, 1, 1, 2, (1,), id="2gpus-world1-worker1"),
        pytest.param(3, 2, 1, 2, (2, 0), id="3gpus-world2-worker1-wraps"),
        pytest.param(8, 8, 5, 6, tuple(range(8)), id="8gpus-world8"),
        pytest.param(2, 4, 0, 1, (), id="too-few"),
        pytest.param(2, 2, 0, 1, (0, 1), id="no-xdist"),
    ],
)
def test_each_worker_has_a_block_of_the_machines_gpus(total, world, slot, workers, block):
    assert gpu_block(total, world, slot, workers) == block


@pytest.mark.parametrize("world", [1, 2])
def test_two_workers_on_four_gpus_put_small_worlds_on_disjoint_gpus(world):
    blocks = [set(gpu_block(4, world, slot, 2)) for slot in range(2)]
    assert blocks[0].isdisjoint(blocks[1]) and blocks[0] | blocks[1] <= {0, 1, 2, 3}


@pytest.mark.parametrize(
    ("cores", "workers", "world", "threads"),
    [
        pytest.param(64, 1, 2, 32, id="one-process"),
        pytest.param(64, 2, 2, 16, id="two-workers-share-the-host"),
        pytest.param(64, 4, 1, 16, id="four-workers-world1"),
        pytest.param(2, 2, 2, 1, id="never-below-one"),
        pytest.param(16, 3, 2, 2, id="uneven"),
    ],
)
def test_pool_ranks_share_this_workers_part_of_the_cores(cores, workers, world, threads):
    assert threads_per_rank(world, cores=cores, workers=workers) == threads


def test_pool_ranks_read_the_worker_count_from_xdist(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    assert threads_per_rank(2, cores=64) == 8


def test_the_gpu_count_is_torchs_and_imports_torch_only_where_a_gpu_driver_is():
    probe = (
        "import sys; from rankgate.harness.pool.gpus import visible_gpu_count; "
        "n = visible_gpu_count(); imported = 'torch' in sys.modules; "
        "import torch; "
        "print(n, torch.cuda.device_count() if torch.cuda.is_available() else 0, imported)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    ours, torchs, imported = out.stdout.split()
    assert ours == torchs
    driver = any(os.path.exists(node) for node in GPU_DRIVER_NODES)
    assert imported == str(driver)
