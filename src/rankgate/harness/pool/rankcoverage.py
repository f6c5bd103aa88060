"""A pool rank's side of coverage across ranks (:mod:`rankgate.harness.coverage_ranks`):
measure with the controller's pytest-cov settings, save at shutdown. No pytest here:
ranks do not import it."""

from __future__ import annotations

import json
import os

from rankgate.harness.pluginnames import COVERAGE_ENV as ENV

_measuring = None  # the pool rank's coverage.Coverage


def start_in_rank() -> None:
    """Measure this rank with the controller's settings, when it measures."""
    global _measuring
    raw = os.environ.get(ENV)
    if not raw or _measuring is not None:
        return
    import coverage

    settings = json.loads(raw)
    _measuring = coverage.Coverage(
        source=settings["source"],
        branch=settings["branch"],
        config_file=settings["config_file"],
        data_file=settings["data_file"],
        data_suffix=True,
    )
    _measuring.start()


def save_in_rank() -> None:
    """Stop measuring and save this rank's data file (the pool is shutting down)."""
    global _measuring
    if _measuring is None:
        return
    _measuring.stop()
    _measuring.save()
    _measuring = None
