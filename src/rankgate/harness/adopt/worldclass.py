"""A suite's own distributed test class, run on rankgate's ranks.

Test methods of a subclass of the named base run on ``world_size`` ranks (a class
attribute or property, the project's own marker on one test, or a ``world_size``
parameter of the test): each is marked ``world(n, backend=...)``, the project's
launcher attribute is switched off while rankgate runs it, and each rank sets the
launcher's variables and calls the project's set-up before the method. A list of
sizes (``world_size = [1, 2]``) becomes one test per size (``[world1]``, ``[world2]``).
A class that starts its own ranks keeps its launcher and is marked ``launches``; one
that tests how the project makes its process group (``own_group=``) runs on the
ranks with rankgate's group hidden and gets a fresh group from its own init.
PyTorch's ``MultiProcessTestCase`` is read by its own attributes: see :mod:`.torchcase`.
"""

from __future__ import annotations

import importlib
import sys

from rankgate.harness.adopt.config import WorldClass

_BACKENDS = {"gloo": "gloo", "nccl": "nccl"}
WORLD_PARAM = "rankgate_world"
"""The parameter rankgate adds to a test whose class names several world sizes."""


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


def makes_own_group(cls: type, world_class: WorldClass) -> bool:
    return any(str(getattr(cls, attr, None)) == value for attr, value in world_class.own_group)


def sizes_of(cls: type, function, markers, world_class: WorldClass, method_name: str):
    """The world sizes the class (or the project's marker on the test) asks for: an
    int, a list of ints, or what was found when it is neither."""
    world = _class_world(cls, world_class, method_name)
    if world_class.marker:
        for marker in markers:
            if marker.name == world_class.marker and marker.args:
                world = marker.args[0]
                break
    required = getattr(function, "_required_world_size", None)  # torch's requires_world_size
    if _is_size(required):
        world = required
    if isinstance(world, (list, tuple)) and len(world) == 1:
        world = world[0]
    return list(world) if isinstance(world, (list, tuple)) else world


def _class_world(cls: type, world_class: WorldClass, method_name: str):
    """The class attribute; a property is read on an instance made for the test."""
    world = getattr(cls, world_class.world, None)
    if isinstance(world, property):
        try:
            world = getattr(cls(method_name), world_class.world)
        except Exception as exc:  # the property needs what only the test's set-up makes
            return f"<the property raised {type(exc).__name__}: {exc}>"
    return world


def world_of_test(item, world_class: WorldClass) -> tuple[int, str] | str:
    """(world, backend) of a test method of an adopted class; a string saying why not."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if WORLD_PARAM in params:  # one of several sizes (pytest_generate_tests)
        world = params[WORLD_PARAM]
    elif world_class.world in params:  # the test's own world_size parameter or fixture
        world = params[world_class.world]
    else:
        markers = list(item.iter_markers())
        world = sizes_of(item.cls, item.function, markers, world_class, item.name)
    if isinstance(world, str) and world.startswith("<"):
        return f"{world_class.world}: {world[1:-1]}"
    if not _is_size(world):
        return f"{world_class.world}={world!r} is not a number of ranks"
    backend = "auto"
    if world_class.backend:
        chosen = getattr(item.cls, world_class.backend, "")
        backend = _BACKENDS.get(chosen.lower() if isinstance(chosen, str) else "", "auto")
    return world, backend


def _is_size(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def several_sizes(sizes) -> list[int] | None:
    """The sizes of a list of several valid sizes (None otherwise)."""
    if isinstance(sizes, list) and len(sizes) > 1 and all(_is_size(s) for s in sizes):
        return sizes
    return None


def prelude(world_class: WorldClass, cls: type | None = None) -> dict:
    if cls is not None and makes_own_group(cls, world_class):  # its init is the test
        return {"env": dict(world_class.env), "own_group": True, "teardown": world_class.teardown}
    return {
        "env": dict(world_class.env),
        "setup": world_class.setup,
        "setup_timeout": world_class.setup_timeout,
        "teardown": world_class.teardown,
    }
