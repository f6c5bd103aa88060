"""SIGINT and SIGTERM while a dispatched job is ours: noted, never fatal, until it is cleaned up.

:func:`caught_interrupts` is held from before a job is submitted until it is released
(cancelled, its logs read, its pod deleted), so a Ctrl-C at any moment in between ends
in a cancel instead of a job left running unseen. Then a handler of the caller's own
gets the signal (a pytest session stops instead of running its next test).
:meth:`Interrupts.sleep` is the wait's sleep, woken by a new signal.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

WAKE_S = 0.1
"""Slice of an interruptible sleep: how soon a poll notices a signal."""


class Interrupts:
    """SIGINT/SIGTERM received while a job is ours to clean up; true once any arrived."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def __bool__(self) -> bool:
        return bool(self.received)

    def arrived(self, signum: int, _frame=None) -> None:
        # Only a list append: a handler that took a lock (Event.set) could deadlock
        # when the signal lands while the main thread holds that same lock.
        self.received.append(signum)

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake within WAKE_S of a new signal (a poll of minutes stays responsive).

        time.sleep alone is resumed after a handler that does not raise (PEP 475).
        """
        before, end = len(self.received), time.monotonic() + seconds
        while len(self.received) == before and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, WAKE_S))


@contextmanager
def caught_interrupts() -> Iterator[Interrupts]:
    """Collect SIGINT/SIGTERM received inside the block instead of dying (main thread only).

    Held from before a submission until the job is cleaned up, so an interrupt that
    arrives while sbatch or the API call runs, or while logs are fetched, still ends
    in a cancel and a delete instead of an orphaned job.
    """
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = {
        sig: signal.signal(sig, interrupts.arrived) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield interrupts
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _pass_on(interrupts, previous)


def _pass_on(interrupts: Interrupts, previous: dict) -> None:
    """Give the first signal to the handler it was held back from, once the job is gone.

    Only a handler someone installed to be told (a pytest session that ends on SIGTERM,
    an outer program's own): the guard holds a signal back, it must not swallow one
    that a caller waits for. Python's own dispositions (die, KeyboardInterrupt) are what
    the guard exists to turn into a cancel and a report, so they are not replayed.
    """
    if not interrupts:
        return
    signum = interrupts.received[0]
    handler = previous[signum]
    if callable(handler) and handler is not signal.default_int_handler:
        signal.raise_signal(signum)
