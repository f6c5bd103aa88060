"""A process group of another backend for one adopted test, over rankgate's world.

A test of PyTorch's own classes makes its group with ``init_process_group(backend)``.
Where rankgate's world has that backend the test uses the world's group; where it has
not (a gloo test on a GPU host, whose world is nccl), the test gets a fresh group of
the backend it asked for, on the world's ranks over the world's store, as the test's
default group. It ends with the test (or at the test's ``destroy_process_group``),
with any group the test made on top of it, and rankgate's group is the default again.

A test that checks how the project makes its group (DeepSpeed's ``init_distributed =
False`` classes) runs with rankgate's group hidden (:func:`world_hidden`): torch says
no group exists until the test's own ``init_process_group``, which gets a fresh group.

Runs on the rank: standard library and torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_hidden: list[object] = []
"""rankgate's group while a test runs with it hidden (torch sees no default group)."""
_active: list[tuple[object, set]] = []
"""(the world's default group, the groups that existed before) while a fresh one is in use."""


def backends_of(text: str) -> set[str]:
    """'cpu:gloo,cuda:nccl' -> {'gloo', 'nccl'}."""
    return {part.rpartition(":")[2].strip().lower() for part in text.split(",") if part.strip()}


def serves(world_backend: str, wanted: str) -> bool:
    """Whether the world's group does every backend ``wanted`` names."""
    return backends_of(wanted) <= backends_of(world_backend)


def start(backend: str) -> None:
    """Make a group of ``backend`` on every rank of the world and make it the default
    group until :func:`end` (every rank calls it in the same test, as new_group needs)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if _active:
        end()  # a second init_process_group without a destroy: the last one wins
    world = c10d._world.default_pg
    if _hidden:
        c10d._update_default_pg(_hidden[-1])  # new_group needs the world's store and ranks
    before = set(c10d._world.pg_map)
    try:
        fresh = dist.new_group(backend=backend, group_desc="rankgate_fresh_for_test")
    except BaseException:
        c10d._update_default_pg(world)
        raise
    _active.append((world, before))
    c10d._update_default_pg(fresh)


def active() -> bool:
    """Whether a test's fresh group is the default group now."""
    return bool(_active)


def end() -> None:
    """Destroy the test's fresh group, and the groups made while it was the default
    (newest first); rankgate's group is the default again."""
    if not _active:
        return
    from torch.distributed import distributed_c10d as c10d

    world, before = _active.pop()
    # destroy_process_group(pg) of the default group would end every group
    c10d._update_default_pg(_hidden[-1] if _hidden else world)
    made = [pg for pg in c10d._world.pg_map if pg not in before]
    for pg in reversed(made):  # pg_map keeps the order they were made in
        c10d.destroy_process_group(pg)
    c10d._update_default_pg(world)


def groups_now() -> set:
    """The process groups this rank has now (to end those a test makes)."""
    from torch.distributed import distributed_c10d as c10d

    return set(c10d._world.pg_map)


def end_groups_since(before: set) -> None:
    """Destroy the groups made since ``before`` on rankgate's world (a test's
    ``new_group`` calls, which its own way's ``destroy_process_group()`` would end)."""
    from torch.distributed import distributed_c10d as c10d

    end()
    world = c10d._world.default_pg
    made = [pg for pg in c10d._world.pg_map if pg not in before and pg is not world]
    for pg in reversed(made):  # pg_map keeps the order they were made in
        c10d.destroy_process_group(pg)


def hidden_world():
    """rankgate's group while :func:`world_hidden` hides it (None otherwise)."""
    return _hidden[-1] if _hidden else None


@contextmanager
def world_hidden() -> Iterator[None]:
    """While it lasts torch sees no default group (``dist.is_initialized()`` is false);
    the test's own group ends with it and rankgate's group is the default again."""
    from torch.distributed import distributed_c10d as c10d

    world = c10d._world.default_pg
    if world is None:  # nothing to hide (a run without rankgate's group)
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
