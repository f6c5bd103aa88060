"""The process group an adopted test makes for itself, on rankgate's world.

A test of PyTorch's own classes (or a class that tests how the project makes its
group, ``own_group=``) starts, in its own way, in a process with no group and makes
one with ``init_process_group``. Adopted, it runs with rankgate's group hidden
(:func:`world_hidden`: ``dist.is_initialized()`` is false), and its init:

- finds rankgate's group again where the world has the backend it asks for
  (:func:`show_world`): nothing to set up;
- else gets a fresh group of that backend on the world's ranks, over the world's
  store (:func:`start`): a gloo test on a GPU host, whose world is nccl.

Its ``destroy_process_group`` (or the end of the test) ends a fresh group with the
groups made on top of it, and hides rankgate's group again; after the test rankgate's
group is the default group once more.

Runs on the rank: standard library and torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_hidden: list[object] = []
"""rankgate's group while a test runs with it hidden (torch sees no default group)."""
_fresh: list[tuple[object, set]] = []
"""(the default group before, the groups that existed before) while a fresh one is in use."""
_shown = [False]
"""Whether the test's init found rankgate's hidden group and shows it."""


def backends_of(text: str) -> set[str]:
    """'cpu:gloo,cuda:nccl' -> {'gloo', 'nccl'}."""
    return {part.rpartition(":")[2].strip().lower() for part in text.split(",") if part.strip()}


def serves(world_backend: str, wanted: str) -> bool:
    """Whether the world's group does every backend ``wanted`` names."""
    return backends_of(wanted) <= backends_of(world_backend)


def hidden_world():
    """rankgate's group while :func:`world_hidden` hides it (None otherwise)."""
    return _hidden[-1] if _hidden else None


def show_world() -> None:
    """The test's init on a hidden world of the backend it asks for: the world's group
    is its default group until :func:`end`."""
    from torch.distributed import distributed_c10d as c10d

    end()
    c10d._update_default_pg(_hidden[-1])
    _shown[0] = True


def start(backend: str) -> None:
    """Make a group of ``backend`` on every rank of the world and make it the default
    group until :func:`end` (every rank calls it in the same test, as new_group needs)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    end()  # a second init_process_group without a destroy: the last one wins
    before_default = c10d._world.default_pg
    world = _hidden[-1] if _hidden else before_default
    c10d._update_default_pg(world)  # its store, ranks
    before = set(c10d._world.pg_map)
    # new_group binds every new group to the world's device (a GPU host's rank GPU): a
    # backend with no side for that device then fails at once, so it is made unbound.
    bound = world.bound_device_id
    unbind = bound is not None and bound.type not in _devices_served(backend)
    if unbind:
        world.bound_device_id = None
    try:
        fresh = dist.new_group(backend=backend, group_desc="rankgate_fresh_for_test")
    finally:
        if unbind:
            world.bound_device_id = bound
        c10d._update_default_pg(before_default)
    _fresh.append((before_default, before))
    c10d._update_default_pg(fresh)


def _devices_served(backend: str) -> list[str]:
    """Device types ``backend`` has a side for ("cpu:gloo,cuda:nccl" names its own)."""
    import torch.distributed as dist

    if ":" in backend:
        return [pair.split(":")[0].strip() for pair in backend.split(",")]
    return list(dist.Backend.backend_capability.get(backend.lower(), []))


def end() -> None:
    """The test's own group ends: a fresh one is destroyed with the groups made while it
    was the default (newest first); a shown world is hidden again."""
    from torch.distributed import distributed_c10d as c10d

    if _shown[0]:
        _shown[0] = False
        c10d._update_default_pg(None)
    if not _fresh:
        return
    before_default, before = _fresh.pop()
    # destroy_process_group(pg) of the default group would end every group
    c10d._update_default_pg(_hidden[-1] if _hidden else before_default)
    made = [pg for pg in c10d._world.pg_map if pg not in before]
    for pg in reversed(made):  # pg_map keeps the order they were made in
        c10d.destroy_process_group(pg)
    c10d._update_default_pg(before_default)


_tests = [0]
"""Tests this rank has run through :func:`store_of_its_own` (the same on every rank)."""


@contextmanager
def store_of_its_own() -> Iterator[None]:
    """While it lasts the groups made on rankgate's world rendezvous under a prefix of
    this test's own: a group made again by a later test (``new_group`` names groups by
    their ranks) must not read the last one's addresses from the shared store, as its
    own way, with a new store per test, never does."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    world = c10d._world.default_pg
    if world is None or world not in c10d._world.pg_map:
        yield
        return
    backend, store = c10d._world.pg_map[world]
    _tests[0] += 1
    c10d._world.pg_map[world] = (backend, dist.PrefixStore(f"rankgate_test{_tests[0]}/", store))
    try:
        yield
    finally:
        c10d._world.pg_map[world] = (backend, store)


@contextmanager
def world_hidden() -> Iterator[None]:
    """While it lasts torch sees no default group until the test makes its own; after
    it rankgate's group is the default again."""
    from torch.distributed import distributed_c10d as c10d

    world = c10d._world.default_pg
    if world is None or _hidden:  # nothing to hide, or hidden already (in place: nested)
        yield
        return
    _hidden.append(world)
    c10d._update_default_pg(None)
    try:
        yield
    finally:
        end()
        _hidden.pop()
        c10d._update_default_pg(world)
