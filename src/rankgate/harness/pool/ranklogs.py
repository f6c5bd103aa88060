"""Log records of a world test's body, caught as pytest catches a plain test's.

During each test pytest puts a handler on the root logger, at the level of
``log_level`` (``--log-level``) and in the format of ``log_format`` and
``log_date_format``, and shows what it caught with the test's report. A world test's
body logs on the ranks: the controller's settings travel with the task, and each rank
writes what its body logged, in that format, to its captured stderr, which every report
carries as that rank's (``Captured stderr call (rank r)``, JUnit, the report).

Standard library only: the rank side runs inside the rank processes.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogSettings:
    """What pytest's logging plugin catches in this session, and how it writes it."""

    level: int | None
    """``log_level``; None: the loggers' own levels (the root's WARNING unless set)."""
    format: str
    date_format: str | None


def settings_of(config) -> LogSettings | None:
    """The controller's settings; None when pytest's logging plugin is off (-p no:logging)."""
    plugin = config.pluginmanager.get_plugin("logging-plugin")
    if plugin is None:
        return None
    return LogSettings(
        level=plugin.log_level,
        format=config.getoption("log_format") or config.getini("log_format"),
        date_format=config.getoption("log_date_format") or config.getini("log_date_format"),
    )


@contextlib.contextmanager
def catching(settings: LogSettings | None) -> Iterator[None]:
    """On a rank: the body's records at the controller's level, in its format, on stderr."""
    if settings is None:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(settings.format, settings.date_format))
    root = logging.getLogger()
    level_before = root.level
    if settings.level is not None:
        handler.setLevel(settings.level)
        if settings.level < level_before:
            root.setLevel(settings.level)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        if root.level != level_before:  # setLevel empties every logger's cache: only on a change
            root.setLevel(level_before)
