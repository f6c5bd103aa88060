"""Threads a test left running: found after the test, named with where they were
started, and never a reason for the rank's process not to end.

A non-daemon thread keeps its interpreter alive at exit: a test that starts one and
returns would leave the rank (in place: the whole launch) waiting for it after a green
summary. Python cannot stop a thread, so the test fails naming each such thread, and
the process ends at exit without waiting for them (:func:`end_without_them`).

Where a thread was started is recorded while a test runs (``Thread.start`` wraps to note
the caller). Standard library only: imported inside rank processes.
"""

from __future__ import annotations

import os
import sys
import threading
import time

JOIN_WAIT_S = 1.0
"""Time the test's threads get to finish on their own after it (one shutting down)."""
_STARTED_AT = "_rankgate_started_at"
_left: list[threading.Thread] = []
"""Every thread a test left running in this process (for the exit)."""
_exit_status = [0]
"""The status the process ends with when such a thread is still alive at exit: the
session's (in place, :func:`session_ended`); a pool's rank ends as it would have."""


class ThreadWatch:
    """The threads alive when a test starts; where each thread it starts is started."""

    def __init__(self) -> None:
        self.before = set(threading.enumerate())
        self._start = threading.Thread.start
        threading.Thread.start = _recording(self._start)

    def left_running(self) -> list[threading.Thread]:
        """The test's non-daemon threads still alive after a short wait; from now on the
        process ends at exit without waiting for them."""
        if getattr(threading.Thread.start, "__wrapped__", None) is self._start:
            threading.Thread.start = self._start
        new = [t for t in threading.enumerate() if t not in self.before and not t.daemon]
        deadline = time.monotonic() + JOIN_WAIT_S
        for thread in new:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t for t in new if t.is_alive()]
        if alive:
            end_without_them(alive)
        return alive


def problem(threads: list[threading.Thread]) -> str:
    """The failure's text: each thread's name and where it was started."""
    named = "; ".join(describe(t) for t in threads)
    count = "1 thread" if len(threads) == 1 else f"{len(threads)} threads"
    return (
        f"rankgate: the test left {count} running: {named}. A non-daemon thread keeps its "
        "process alive at exit: stop and join it before the test returns, or start it "
        "with daemon=True"
    )


def describe(thread: threading.Thread) -> str:
    """ "'stuck-worker' (started at test_x.py:12 in test_leaves)"."""
    where = getattr(thread, _STARTED_AT, "")
    return f"{thread.name!r}" + (f" (started at {where})" if where else "")


def session_ended(status: int) -> None:
    """The session's exit status: what the process ends with if a thread keeps it."""
    _exit_status[0] = int(status)


def end_without_them(threads: list[threading.Thread]) -> None:
    """At exit, before the interpreter waits for its non-daemon threads (threading's own
    exit hooks run first), end the process if any of ``threads`` is still running."""
    if not _left:
        threading._register_atexit(_end_if_left)  # type: ignore[attr-defined]
    _left.extend(threads)


def _end_if_left() -> None:
    alive = [t for t in _left if t.is_alive()]
    if not alive:
        return
    names = ", ".join(describe(t) for t in alive)
    print(f"rankgate: ending the process without waiting for {names}", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(_exit_status[0])


def _recording(start):
    def start_and_note_where(thread: threading.Thread) -> None:
        setattr(thread, _STARTED_AT, _caller())
        return start(thread)

    start_and_note_where.__wrapped__ = start  # type: ignore[attr-defined]
    return start_and_note_where


def _caller() -> str:
    """'test_x.py:12 in test_leaves': the first frame outside threading and this module."""
    frame = sys._getframe(2)
    skipped = (threading.__file__, __file__)
    while frame is not None and frame.f_code.co_filename in skipped:
        frame = frame.f_back
    if frame is None:
        return ""
    name = os.path.basename(frame.f_code.co_filename)
    return f"{name}:{frame.f_lineno} in {frame.f_code.co_name}"
