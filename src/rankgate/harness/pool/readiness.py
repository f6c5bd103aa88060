"""Waiting on a pool's rank pipes and process sentinels through one ``poll`` object.

``multiprocessing.connection.wait`` builds a selector and registers every object anew
at each call: tens of microseconds a call in the controller, which waits several times
a test (once per rank that answers, and twice to see that no rank died between tests).
Here the objects are registered once and each wait is one ``poll`` call; what is ready
comes back as the objects themselves, as from ``multiprocessing.connection.wait``.
"""

from __future__ import annotations

import math
import select
from collections.abc import Iterable
from typing import Any


class Readiness:
    """Connections (anything with ``fileno()``) and sentinels (file descriptors) to wait on."""

    def __init__(self, objects: Iterable[Any] = ()) -> None:
        self._poll = select.poll()
        self._objects: dict[int, Any] = {}
        for obj in objects:
            self.add(obj)

    def add(self, obj: Any) -> None:
        fd = _fd(obj)
        self._objects[fd] = obj
        self._poll.register(fd, select.POLLIN)

    def remove(self, obj: Any) -> None:
        fd = _fd(obj)
        del self._objects[fd]
        self._poll.unregister(fd)

    def wait(self, timeout: float | None) -> set[Any]:
        """The objects ready now, or within ``timeout`` seconds (None: until one is).
        A sentinel is ready once its process has ended, a pipe once it has data or is
        closed, as with ``multiprocessing.connection.wait``."""
        ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
        return {self._objects[fd] for fd, _ in self._poll.poll(ms)}


def _fd(obj: Any) -> int:
    return obj if isinstance(obj, int) else obj.fileno()
