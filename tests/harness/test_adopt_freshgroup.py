"""A test of PyTorch's own classes that asks init_process_group for a backend rankgate's
world has not gets a fresh group of that backend for the test, over the world's ranks
and store, and rankgate's group comes back after it.

The GPU host's case (a gloo test on an nccl world) is played on CPU: the world is
gloo, and the test asks for "othergloo", gloo registered under another name, so the
fresh group does real collectives through a backend the world has not.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from rankgate.harness.adopt import freshgroup, torchcase

OTHER = "othergloo"


def _gloo_by_another_name(store, rank, size, timeout):
    return dist.ProcessGroupGloo(store, rank, size, timeout)


def _register_other_backend() -> None:
    if not hasattr(dist.Backend, OTHER.upper()):
        dist.Backend.register_backend(OTHER, _gloo_by_another_name, devices=["cpu"])


def _sum_of_ranks(group=None) -> float:
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t, group=group)
    return t.item()


@pytest.mark.world(2, backend="gloo")
def test_another_backend_gets_a_fresh_group_for_the_test(rank):
    _register_other_backend()
    world = c10d._world.default_pg
    groups_before = set(c10d._world.pg_map)
    with torchcase.redirecting():
        dist.init_process_group(OTHER, rank=rank, world_size=2)
        fresh = c10d._world.default_pg
        assert fresh is not world
        assert dist.get_backend() == OTHER
        assert (dist.get_rank(), dist.get_world_size()) == (rank, 2)
        assert _sum_of_ranks() == 3.0  # through the fresh group, on the world's ranks
        sub = dist.new_group(ranks=[0, 1])  # a group the test makes on top of it
        assert _sum_of_ranks(sub) == 3.0
        # no destroy_process_group: the group ends with the test
    assert c10d._world.default_pg is world
    assert dist.get_backend() == "gloo"
    assert set(c10d._world.pg_map) == groups_before  # the fresh group and its subgroup gone
    assert fresh not in c10d._world.pg_map and sub not in c10d._world.pg_map
    assert _sum_of_ranks() == 3.0  # rankgate's group still works


@pytest.mark.world(2, backend="gloo")
def test_a_fresh_cpu_only_group_on_a_world_bound_to_a_gpu(rank):
    # A GPU host's world is bound to this rank's GPU, and torch's new_group hands that
    # device to every group made after it: a backend without a GPU side then failed with
    # "No backend type associated with device type cuda". Played here by binding the
    # gloo world to a device by hand; the fresh group is made without it.
    _register_other_backend()
    world = c10d._world.default_pg
    bound = torch.device("cuda", 0)
    world.bound_device_id = bound
    try:
        with torchcase.redirecting():
            dist.init_process_group(OTHER, rank=rank, world_size=2)
            assert dist.get_backend() == OTHER
            assert _sum_of_ranks() == 3.0
            assert world.bound_device_id == bound  # the world keeps its device meanwhile
            dist.destroy_process_group()
    finally:
        world.bound_device_id = None
    assert c10d._world.default_pg is world and _sum_of_ranks() == 3.0


@pytest.mark.world(2, backend="gloo")
def test_the_tests_destroy_ends_the_fresh_group_and_a_second_init_gets_another(rank):
    _register_other_backend()
    world = c10d._world.default_pg
    groups_before = set(c10d._world.pg_map)
    with torchcase.redirecting():
        dist.init_process_group(OTHER, rank=rank, world_size=2)
        first = c10d._world.default_pg
        dist.destroy_process_group()
        assert c10d._world.default_pg is world
        assert first not in c10d._world.pg_map
        assert dist.get_backend() == "gloo"
        dist.init_process_group(OTHER, rank=rank, world_size=2)
        second = c10d._world.default_pg
        assert second not in (world, first)
        assert _sum_of_ranks() == 3.0
        dist.init_process_group("gloo", rank=rank, world_size=2)  # the world's own again
        assert c10d._world.default_pg is world
        assert second not in c10d._world.pg_map
    assert set(c10d._world.pg_map) == groups_before


@pytest.mark.world(2, backend="gloo")
def test_the_worlds_backend_reuses_the_world_and_another_size_is_refused(rank):
    world = c10d._world.default_pg
    groups_before = set(c10d._world.pg_map)
    with torchcase.redirecting():
        dist.init_process_group("cpu:gloo", rank=rank, world_size=2)
        assert c10d._world.default_pg is world
        sub = dist.new_group(ranks=[0, 1])  # on rankgate's world: it stays (see below)
        assert _sum_of_ranks(sub) == 3.0
        with pytest.raises(torchcase.ProcessGroupRequestError) as caught:
            dist.init_process_group("gloo", rank=rank, world_size=4)
    assert str(caught.value) == (
        "init_process_group(world_size=4) on rankgate's world of 2 ranks: "
        "the class's world_size must say the same"
    )
    # a group made on rankgate's world stays for the next test: projects keep theirs
    # in module globals (DeepSpeed's groups._WORLD_GROUP) that the next test reads
    assert set(c10d._world.pg_map) == groups_before | {sub}
    assert _sum_of_ranks(sub) == 3.0
    assert c10d._world.default_pg is world


@pytest.mark.unit
@pytest.mark.parametrize(
    ("world", "wanted", "served"),
    [
        ("gloo", "gloo", True),
        ("cpu:gloo,cuda:nccl", "gloo", True),
        ("cpu:gloo,cuda:nccl", "nccl", True),
        ("nccl", "gloo", False),  # a GPU host's nccl world, a gloo test: a fresh group
        ("gloo", "cpu:gloo,cuda:nccl", False),
        ("gloo", OTHER, False),
    ],
)
def test_which_backends_the_world_serves(world, wanted, served):
    assert freshgroup.serves(world, wanted) is served


@pytest.mark.world(2, backend="gloo")
def test_a_test_of_its_own_init_sees_no_group_until_it_makes_one(rank):
    _register_other_backend()
    world = c10d._world.default_pg
    groups_before = set(c10d._world.pg_map)
    with torchcase.redirecting(), freshgroup.world_hidden():
        assert not dist.is_initialized()  # as in its own way's new process
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=2)
        assert c10d._world.default_pg is world  # the world's backend: rankgate's group
        assert _sum_of_ranks() == 3.0
        dist.destroy_process_group()
        assert not dist.is_initialized()  # as after its own way's destroy
        dist.init_process_group(OTHER)  # another backend: a fresh group, left to the end
        assert dist.get_backend() == OTHER and c10d._world.default_pg is not world
        assert _sum_of_ranks() == 3.0
    assert c10d._world.default_pg is world
    assert set(c10d._world.pg_map) == groups_before
    assert _sum_of_ranks() == 3.0


@pytest.mark.world(2, backend="gloo")
def test_a_group_made_again_by_the_next_test_gets_its_own_rendezvous(rank):
    # new_group names a group by its ranks: made again by the next test, it must not
    # read the last one's addresses from rankgate's store (its own way has a new store)
    for _ in range(2):  # two tests, one after the other
        with torchcase.redirecting():
            sub = dist.new_group(ranks=[0, 1], use_local_synchronization=True)
            assert _sum_of_ranks(sub) == 3.0
