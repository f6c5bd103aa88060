"""In place, a plain test sees no process group, as in the pool's controller (group.py):
the rank leaves its group before its plain tests and starts the one the next world or
every_rank test needs. One rank, gloo, a FileStore in tmp_path."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from rankgate.harness.aftertest import AfterTestCheck
from rankgate.harness.inplace.group import InPlaceGroup
from rankgate.harness.inplace.schedule import NO_GROUP, PLAIN_PHASE, WHOLE_WORLD, Share
from rankgate.harness.rankstate import needs_default_group
from rankgate.launch.env import LaunchEnv

pytestmark = pytest.mark.unit

PLAIN = Share((0,), PLAIN_PHASE, 0, False)
EVERY_RANK = Share((0,), 0, 0, False)
WORLD_1 = Share((0,), 1, 0, True)


@pytest.fixture
def group(tmp_path, monkeypatch):
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANKGATE_STORE", str(tmp_path / "store"))
    launch = LaunchEnv(
        launcher="torchrun", rank=0, world_size=1, local_rank=0, local_world_size=1, job_id="t"
    )
    assert not dist.is_initialized()
    # The group sets the launcher's variables (RANK, WORLD_SIZE, MASTER_PORT...) as a rank's
    # would: left in this worker, every later pytest it starts would take itself for a rank.
    saved = dict(os.environ)
    made = InPlaceGroup(launch, rendezvous_s=30)
    yield made
    if dist.is_initialized():
        dist.destroy_process_group()
    os.environ.clear()
    os.environ.update(saved)


def test_a_plain_test_has_no_group_and_the_next_world_test_gets_one(group):
    # What this process runs already is not the test's (an earlier test's in this worker).
    check = AfterTestCheck()
    assert dist.is_initialized() and group.current == WHOLE_WORLD
    met = []
    group.enter(PLAIN, lambda: met.append("plain"))
    assert not dist.is_initialized() and group.current == NO_GROUP
    assert not group.lost()  # no group is what a plain test should have
    assert check.problems(has_group=False) == []
    with pytest.raises(ValueError) as exc:
        dist.all_reduce(torch.ones(1))
    assert needs_default_group(exc.value)
    group.renew()  # a plain test's trouble: nothing to start
    assert not dist.is_initialized()
    group.enter(WORLD_1, lambda: met.append("world"))
    assert dist.is_initialized() and dist.get_world_size() == 1
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 1
    group.enter(PLAIN, lambda: met.append("plain"))
    assert not dist.is_initialized()
    group.enter(EVERY_RANK, lambda: met.append("every"))  # the launcher's group again
    assert dist.is_initialized() and group.current == WHOLE_WORLD
    assert met == ["world", "every"]  # only a group's ranks meet


def test_a_plain_test_that_lost_nothing_is_not_failed_for_it(group):
    check = AfterTestCheck()
    group.enter(PLAIN, lambda: None)
    assert check.problems(has_group=True)  # a world test would be
    group.enter(WORLD_1, lambda: None)
    dist.destroy_process_group()
    assert group.lost()


def test_leaving_the_group_for_plain_tests_costs_little(group):
    # Once per run of plain tests (they come last in the plan, schedule.py), not per test.
    started = time.perf_counter()
    group.enter(PLAIN, lambda: None)
    left = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(100):
        group.enter(PLAIN, lambda: None)  # the next plain test: already without one
    per_test = (time.perf_counter() - started) / 100
    assert left < 1.0 and per_test < 1e-4, (left, per_test)
