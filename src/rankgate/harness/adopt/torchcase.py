"""PyTorch's own distributed test classes, run on rankgate's ranks.

``MultiProcessTestCase`` and ``DistributedTestBase`` (torch.testing._internal.
common_distributed) start their ranks themselves: ``setUp`` spawns ``world_size``
processes, and ``__init__`` wraps the test method so that the parent joins them
while each child runs the method with ``self.rank`` set; the method makes its own
process group (``init_process_group`` over a FileStore at ``self.file_name``, or
env://). Adopted, by those same attributes:

- ``setUp`` starts no process (the instance's ``_spawn_processes`` and
  ``_fork_processes`` do nothing);
- the method itself runs on this rank, with ``self.rank`` this rank and
  ``self.file_name`` one file every rank sees;
- it starts with rankgate's group hidden, as its own way's child starts with no group;
  its ``init_process_group`` finds rankgate's group again (the same world size, else
  an error naming both); asked for a backend the world has not, it gets a fresh group
  of that backend on the world's ranks for the test (:mod:`.freshgroup`); its
  ``destroy_process_group`` hides rankgate's group again;
- its own ``env://`` or ``tcp://`` rendezvous (``torch.distributed._dist2.new_group``
  on a fixed ``MASTER_PORT``) is served by rankgate's world store (:mod:`.ownstore`);
- ``sys.exit`` with one of torch's skip exit codes (``skip_if_lt_x_gpu``) is that skip.

Runs on the rank (and in the controller for the set-up): standard library and torch.
"""

from __future__ import annotations

import functools
import inspect
import sys
import unittest
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rankgate.errors import RankgateError
from rankgate.harness.adopt import freshgroup, ownstore

BASE_MODULE = "torch.testing._internal.common_distributed"
BASE_NAMES = ("MultiProcessTestCase",)
_SPAWNERS = ("_spawn_processes", "_fork_processes")
ADOPTED_ATTR = "__rankgate_adopted__"
_redirecting = [0]
"""Above 0 while an adopted test runs on this rank (its set-up and tear-down in place)."""


class ProcessGroupRequestError(RankgateError, RuntimeError):
    """A test asks its process group for what rankgate's world is not."""


def is_torch_case(cls: type | None) -> bool:
    """Whether ``cls`` derives from PyTorch's MultiProcessTestCase."""
    module = sys.modules.get(BASE_MODULE)
    if cls is None or module is None:
        return False
    bases = [getattr(module, name, None) for name in BASE_NAMES]
    return any(isinstance(b, type) and issubclass(cls, b) for b in bases)


def no_processes(*_args, **_kwargs) -> None:
    """What setUp's process start does on an adopted test: rankgate's ranks exist."""


def without_processes(instance) -> None:
    """Before setUp: the instance starts no processes (module-level, so it pickles)."""
    for name in _SPAWNERS:
        setattr(instance, name, no_processes)


def on_this_rank(instance, method: Callable, file_name: str | None = None) -> Callable:
    """The test method as one of the class's own children runs it, on this rank."""
    import torch.distributed as dist

    raw = getattr(method, "__func__", method)

    @functools.wraps(raw)
    def run(*args, **kwargs):
        instance.rank = dist.get_rank()
        if file_name is not None:
            instance.file_name = file_name
        with redirecting(), freshgroup.world_hidden():  # no group until the test's init
            try:
                return raw(instance, *args, **kwargs)
            except SystemExit as exc:
                _raise_skip_for(exc)
                raise

    return run


@contextmanager
def redirecting() -> Iterator[None]:
    """While it lasts, the test's init_process_group and destroy_process_group leave
    rankgate's group in place (in place it spans the test's setUp and tearDown too);
    a fresh group the test asked for ends with it."""
    install_redirect()
    if _redirecting[0] > 0:  # nested (in place: setUp and tearDown around the method)
        _redirecting[0] += 1
        try:
            yield
        finally:
            _redirecting[0] -= 1
        return
    _redirecting[0] += 1
    try:
        with freshgroup.store_of_its_own(), ownstore.serving_world():
            yield  # its own env:// or tcp:// rendezvous is the world's store
    finally:
        _redirecting[0] -= 1
        # A fresh group ends with the test; groups it made on rankgate's world stay, as
        # projects keep them in module globals (DeepSpeed's groups._WORLD_GROUP) that
        # the next test in this process reads.
        freshgroup.end()


def with_own_group(func: Callable) -> Callable:
    """A test that makes its own process group (and checks how the project makes it):
    it runs with rankgate's group hidden, and its init_process_group finds it again (or
    gets a fresh group of a backend the world has not)."""

    @functools.wraps(func)
    def run(*args, **kwargs):
        with redirecting(), freshgroup.world_hidden():
            return func(*args, **kwargs)

    return run


def _raise_skip_for(exc: SystemExit) -> None:
    """torch's skip decorators end a child with an exit code: the same skip here."""
    module = sys.modules.get(BASE_MODULE)
    for skip in getattr(module, "TEST_SKIPS", {}).values():
        if exc.code == skip.exit_code:
            raise unittest.SkipTest(skip.message) from None


# ------------------------------------------------------------- the process group


def install_redirect() -> None:
    """torch.distributed's init_process_group and destroy_process_group, replaced once
    per process by ones that leave rankgate's group in place while a test runs."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if getattr(c10d.init_process_group, ADOPTED_ATTR, False):
        return
    replaced = {  # by identity: a module's other globals may not be hashable
        id(c10d.init_process_group): _redirected_init(c10d.init_process_group),
        id(c10d.destroy_process_group): _redirected_destroy(c10d.destroy_process_group),
    }
    for module in (dist, c10d, *list(sys.modules.values())):
        names = getattr(module, "__dict__", None)
        if not isinstance(names, dict):
            continue
        for name, value in list(names.items()):
            if id(value) in replaced:
                setattr(module, name, replaced[id(value)])


def _redirected_init(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        import torch.distributed as dist

        hidden = freshgroup.hidden_world()
        if not (_redirecting[0] > 0 and (dist.is_initialized() or hidden is not None)):
            return original(*args, **kwargs)
        asked = signature.bind(*args, **kwargs).arguments
        freshgroup.end()  # a second init without a destroy: the last one asked wins
        group = hidden or dist.group.WORLD
        world, rank, backend = group.size(), group.rank(), dist.get_backend(group)
        size = asked.get("world_size", -1)
        if size not in (-1, None, world):
            raise ProcessGroupRequestError(
                f"init_process_group(world_size={size}) on rankgate's world of {world} ranks: "
                "the class's world_size must say the same"
            )
        if asked.get("rank", -1) not in (-1, None, rank):
            raise ProcessGroupRequestError(
                f"init_process_group(rank={asked['rank']}) on rank {rank}"
            )
        wanted = str(asked.get("backend") or "").lower()
        if wanted and not freshgroup.serves(backend, wanted):
            freshgroup.start(wanted)  # e.g. gloo asked on a GPU host's nccl world
        elif hidden is not None:
            freshgroup.show_world()  # the world's group is the one it asks for
        return None  # rankgate's group (or the fresh one) is the test's default group

    setattr(init_process_group, ADOPTED_ATTR, True)
    return init_process_group


def _redirected_destroy(original):
    @functools.wraps(original)
    def destroy_process_group(group=None):
        import torch.distributed as dist

        if _redirecting[0] > 0 and (group is None or group is dist.group.WORLD):
            freshgroup.end()  # the test's own group, if it had one
            return None  # rankgate's group outlives the test
        return original(group)

    setattr(destroy_process_group, ADOPTED_ATTR, True)
    return destroy_process_group
