"""Reference communication layer: detection, backends and their selection.

Main API:

- ``detect_topology(requested)`` -> ``Topology``: peer-access matrix and links of the GPUs.
- ``create_backend(name="auto", ...)`` -> ``CommBackend``: agreed on by every rank
  (``auto`` tries p2p, then nccl, then gloo); ``valid_names()`` lists the choices.
- ``CommBackend``: all_reduce, broadcast, all_gather, reduce_scatter, gather, barrier,
  send/recv, synchronize, destroy. Implementations: ``GlooBackend``, ``NcclBackend``,
  ``P2PBackend`` (symmetric memory for small all-reduces and broadcasts, NCCL otherwise).
- Errors: ``CommError`` and its subclasses below.
"""

from .backend import (
    BackendDestroyedError,
    BackendUnavailableError,
    CollectiveTimeoutError,
    CommBackend,
    CommError,
    GlooBackend,
    NcclBackend,
    ShapeMismatchError,
    UnknownBackendError,
)
from .detect import Topology, detect_topology
from .p2p import DISABLE_ENV, P2PBackend, P2PConfig
from .select import BACKEND_ENV, Selection, create_backend, decide, select_backend, valid_names

__all__ = [
    "BACKEND_ENV",
    "DISABLE_ENV",
    "BackendDestroyedError",
    "BackendUnavailableError",
    "CollectiveTimeoutError",
    "CommBackend",
    "CommError",
    "GlooBackend",
    "NcclBackend",
    "P2PBackend",
    "P2PConfig",
    "Selection",
    "ShapeMismatchError",
    "Topology",
    "UnknownBackendError",
    "create_backend",
    "decide",
    "detect_topology",
    "select_backend",
    "valid_names",
]
