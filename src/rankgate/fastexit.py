"""A pytest process that loaded rankgate ends without the interpreter's last garbage
collection.

Python's shutdown collects every object still alive; with torch imported that pass takes
0.4-0.8 s, paid by every xdist worker before the run ends, every rank pytest of an
in-place launch and every pytest a test starts. At exit, once every ``atexit`` handler
registered later has run (coverage's save, logging's flush, temp folders' removal),
``gc.freeze()`` moves what is alive out of the collector's reach: the objects are still
released by their reference counts; only cycles are left to the operating system.
"""

from __future__ import annotations

import atexit
import gc


def skip_last_collection() -> None:
    """Freeze the heap at exit (handlers registered later run first). Called once, as
    rankgate's entry point is imported."""
    atexit.register(gc.freeze)
