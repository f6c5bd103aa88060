"""The rendezvous an adopted test makes for itself, served by rankgate's world.

PyTorch's own test classes and torch's newer group API (``torch.distributed._dist2.
new_group``) rendezvous through ``env://`` on an address the test sets itself, often a
fixed one (``MASTER_PORT=29500``). Its own way, each test is a new process whose rank 0
hosts a new store there. On rankgate's ranks that goes wrong twice:

- under torchrun (``TORCHELASTIC_USE_AGENT_STORE``) every rank only connects, to a port
  nobody serves: the test hangs in its own ``new_group``;
- in one process, torch keeps the store it hosted on that port for the next test (one
  server per port and process): the next test's group reads the last one's addresses
  and its ranks meet the wrong peers (a SIGSEGV in ``split_group``).

While an adopted test runs (:func:`serving`), an ``env://`` or ``tcp://`` rendezvous
returns the world's store under a prefix of its own (the test's, and a count of the
rendezvous it made: every rank makes them in the same order), with the world's rank
and size. A FileStore at ``self.file_name`` needs nothing: every rank sees that file.

Runs on the rank: standard library and torch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlparse

from rankgate.errors import RankgateError

SCHEMES = ("env", "tcp")
"""The rendezvous that name an address (the ``file`` one names a file every rank sees)."""

_count = [0]
"""Rendezvous made in the test running now (the same on every rank)."""


class RendezvousError(RankgateError, RuntimeError):
    """A test's rendezvous asks for what rankgate's world is not."""


@contextmanager
def serving_world() -> Iterator[None]:
    """:func:`serving` on the default group of the moment (rankgate's world, whose store
    is the test's prefix of it by now: ``freshgroup.store_of_its_own``)."""
    from torch.distributed import distributed_c10d as c10d

    world = c10d._world.default_pg
    if world is None or world not in c10d._world.pg_map:
        yield
        return
    with serving(world, c10d._world.pg_map[world][1]):
        yield


@contextmanager
def serving(world, store) -> Iterator[None]:
    """While it lasts, the test's own rendezvous are the world's ``store`` (the test's
    prefix of it) with ``world``'s rank and size."""
    import torch.distributed.rendezvous  # noqa: F401  (the module, not the function)

    handlers = sys.modules["torch.distributed.rendezvous"]._rendezvous_handlers
    saved = {scheme: handlers.get(scheme) for scheme in SCHEMES}
    timeout = store.timeout
    _count[0] = 0
    for scheme in SCHEMES:
        handlers[scheme] = _handler(world, store)
    try:
        yield
    finally:
        for scheme, handler in saved.items():
            if handler is None:
                handlers.pop(scheme, None)
            else:
                handlers[scheme] = handler
        store.set_timeout(timeout)  # a test's group may have set the shared store's


def _handler(world, store):
    def rendezvous(url: str, timeout=None, **_kwargs):
        import torch.distributed as dist

        rank, size = world.rank(), world.size()
        asked = _asked(url)
        if asked.get("world_size", size) != size:
            raise RendezvousError(
                f"rendezvous {url!r} with world size {asked['world_size']} on rankgate's "
                f"world of {size} ranks: the class's world_size must say the same"
            )
        if asked.get("rank", rank) != rank:
            raise RendezvousError(f"rendezvous {url!r} with rank {asked['rank']} on rank {rank}")
        _count[0] += 1
        yield dist.PrefixStore(f"rankgate_rendezvous{_count[0]}/", store), rank, size
        raise RuntimeError("rankgate: a test's rendezvous is made once")

    return rendezvous


def _asked(url: str) -> dict[str, int]:
    """The rank and world size a rendezvous URL (or env:// its variables) names."""
    query = {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}
    asked = {}
    for name, variable in (("rank", "RANK"), ("world_size", "WORLD_SIZE")):
        value = query.get(name)
        if value is None and url.startswith("env"):
            value = os.environ.get(variable)
        if value not in (None, "", "-1"):
            asked[name] = int(value)
    return asked
