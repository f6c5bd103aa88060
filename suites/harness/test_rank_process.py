"""A rank's process is a plain Python process to the test body: what the body starts
(DataLoader workers, a multiprocessing pool) starts as it would in a process of its own,
in the pool and in place."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler


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
