"""What a rank does before an adopted test: the launcher's variables, the project's set-up.

Runs on the rank (a pool's rank process, or every pytest under a launcher), after
rankgate's process group exists: standard library and torch only.
"""

from __future__ import annotations

import importlib
import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

LAUNCHER_VARIABLES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"
)  # fmt: skip
"""What torchrun sets, and what code written for it reads."""

_ports: dict[tuple[int, int], str] = {}
"""A free port per (process group, world): agreed on once, not per test."""


def rank_values() -> dict[str, str]:
    """This rank's launcher values; under a launcher, the launcher's own where it set them."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    env = os.environ
    return {
        "rank": str(rank),
        "local_rank": env.get("LOCAL_RANK", str(rank)),  # a pool's ranks share one host
        "world_size": str(world),
        "local_world_size": env.get("LOCAL_WORLD_SIZE", str(world)),
        "master_addr": env.get("MASTER_ADDR", "127.0.0.1"),
        "master_port": env.get("MASTER_PORT") or _agreed_port(),
    }


def _agreed_port() -> str:
    """A port rank 0 found free, the same on every rank (for code that only reads it)."""
    import torch.distributed as dist

    key = (id(dist.group.WORLD), dist.get_world_size())
    if key not in _ports:
        box = [None]
        if dist.get_rank() == 0:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                box[0] = str(s.getsockname()[1])
        dist.broadcast_object_list(box, src=0)
        _ports[key] = box[0]
    return _ports[key]


@contextmanager
def launcher_environment(extra: Mapping[str, str]) -> Iterator[None]:
    """The launcher's variables and the project's own (``extra``: NAME -> template)."""
    values = rank_values()
    wanted = {name: values[name.lower()] for name in LAUNCHER_VARIABLES}
    wanted.update({name: template.format(**values) for name, template in extra.items()})
    saved = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def call_target(target: str):
    """Import ``module:name`` and return the object."""
    module_name, _, name = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj
