"""A suite's own distributed test class, run on rankgate's ranks.

Test methods of a subclass of the named base run on ``world_size`` ranks (a class
attribute, or the project's own marker on one test): each is marked
``world(n, backend=...)``, the project's launcher attribute is switched off while
rankgate runs it, and each rank sets the launcher's variables and calls the project's
set-up before the method. A class that starts its own ranks (say one that tests
the project's init code) keeps its launcher and is marked ``launches``.
"""

from __future__ import annotations

import importlib
import sys

from rankgate.harness.adopt.config import WorldClass

_BACKENDS = {"gloo": "gloo", "nccl": "nccl"}


def base_class(world_class: WorldClass) -> type | None:
    """The base class, once a test module has imported it (None before)."""
    module_name, _, name = world_class.target.partition(":")
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None
    return getattr(module, name, None)


def starts_own_ranks(cls: type, world_class: WorldClass) -> bool:
    return any(str(getattr(cls, attr, None)) == value for attr, value in world_class.launches)


def world_of_test(item, world_class: WorldClass) -> tuple[int, str] | str:
    """(world, backend) of a test method of an adopted class; a string saying why not."""
    world = getattr(item.cls, world_class.world, None)
    if world_class.marker:
        marker = item.get_closest_marker(world_class.marker)
        if marker is not None and marker.args:
            world = marker.args[0]
    if isinstance(world, (list, tuple)) and len(world) == 1:
        world = world[0]
    if not isinstance(world, int) or isinstance(world, bool):
        return f"{world_class.world}={world!r} is not one number of ranks"
    backend = "auto"
    if world_class.backend:
        backend = _BACKENDS.get(str(getattr(item.cls, world_class.backend, "")).lower(), "auto")
    return world, backend


def prelude(world_class: WorldClass) -> dict:
    return {"env": dict(world_class.env), "setup": world_class.setup}
