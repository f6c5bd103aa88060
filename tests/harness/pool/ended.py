"""Waiting for a process the tests started to end (tests/harness/pool's own helper)."""

from __future__ import annotations

import time

from rankgate.harness.leaks import running


def ended_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` is gone or a zombie (ended, not yet reaped) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while running(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
