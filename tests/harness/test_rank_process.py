"""A rank's process is a plain Python process to the test body: what the body starts
(DataLoader workers, a multiprocessing pool) starts as it would in a process of its own,
and what the test's conftest.py files set up when pytest imported them holds there too,
in the pool and in place."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

pytestmark = pytest.mark.dist


@pytest.mark.world(2)
def test_a_dataloader_over_a_dataset_class_of_the_test_starts_its_workers(rank, world_size):
    # Before: pool ranks inherited the fork server's start method, so workers needed the
    # dataset pickled: "Can't pickle local object", where a plain process forks them.
    class Squares(Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            return torch.tensor([float(i * i)])

    sampler = DistributedSampler(Squares(), num_replicas=world_size, rank=rank, shuffle=False)
    total = torch.zeros(1)
    for batch in DataLoader(Squares(), batch_size=4, sampler=sampler, num_workers=2):
        total += batch.sum()
    dist.all_reduce(total)
    assert total.item() == sum(i * i for i in range(16))


@pytest.mark.world(2)
def test_the_start_method_is_a_plain_processs(rank):
    plain = subprocess.run(
        [sys.executable, "-c", "import multiprocessing as m; print(m.get_start_method())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert multiprocessing.get_start_method() == plain


def test_the_conftests_module_level_set_up_holds_on_the_ranks(pytester):
    # Before: the ranks never imported a conftest.py: its default dtype was float32 there,
    # and whatever else it configured at import was missing.
    pytester.makeconftest(
        """
        import logging

        import torch

        torch.set_default_dtype(torch.float64)
        logging.getLogger("configured.by.top").setLevel(logging.ERROR)
        """
    )
    sub = pytester.mkdir("sub")
    (sub / "conftest.py").write_text(
        "import logging\nlogging.getLogger('configured.by.sub').setLevel(logging.ERROR)\n"
    )
    (sub / "test_sub.py").write_text(
        textwrap.dedent(
            """
            import logging

            import pytest
            import torch

            @pytest.mark.world(2)
            @pytest.mark.parametrize("i", range(2))  # the second: after the pool's reset
            def test_both_conftests_and_the_dtype(i, rank):
                for name in ("configured.by.top", "configured.by.sub"):
                    assert logging.getLogger(name).level == logging.ERROR, name
                assert torch.get_default_dtype() == torch.float64
            """
        )
    )
    pytester.makeini("[pytest]\n")
    default = torch.get_default_dtype()
    try:
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    finally:  # the inner conftest ran in this process too: later tests would send float64
        torch.set_default_dtype(default)
    result.assert_outcomes(passed=2)
