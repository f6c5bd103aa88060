"""A rank's long-lived objects, left out of the garbage collections its tests start.

A rank lives for many tests and holds torch, pytest and every test module it imported.
A test that calls ``gc.collect()`` (training code does, between steps: OLMo-core's
checkpoint tests six times each) walked all of it: 0.24 s a call in a warm rank with
OLMo-core's tests imported (benchmarks/results/cpu/adopt-speed-2026-11-28b/gc-profile/).
``gc.freeze`` moves what is alive now into the permanent generation, which no collection
walks; what tests make afterwards is collected as usual. The cost: an object frozen here
that later becomes garbage inside a reference cycle is never freed. What is alive at a
freeze is what the modules built at import, which lives as long as the rank anyway.
"""

from __future__ import annotations

import gc


def keep_out_of_collections(tests_ran: bool) -> None:
    """Freeze every object alive now. After tests ran, one collection first frees their
    garbage, so none of it is kept for good; before any test there is none worth it."""
    if tests_ran:
        gc.collect()
    gc.freeze()
