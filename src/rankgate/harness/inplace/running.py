"""The running test, as the main thread and the watcher threads share it.

The main thread plays one test's round (``round``). A watcher (the hang watch, the signal
watch) may stop the run at any time: it records the running test itself and ends the
process, since a main thread stuck in a collective can do neither. ``RunningTest`` is
what such a stop finds of the test; ``StopGate`` decides which of the threads records
its verdict, and parks the main thread once a watcher has begun.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

Step = Callable[[], "Step | None"]
"""One step of a round: it returns the next (None: the round is over)."""


@dataclass(slots=True)
class RunningTest:
    """The test the main thread runs, as a stopping watcher finds it."""

    item: pytest.Item | None = None
    attempt: int = 1
    """Its attempt (reruns): store keys name it from the second on (``Schedule.store_key``)."""
    own: list[pytest.TestReport] | None = None
    """Its own reports once in the results file, the JUnit's still to come: a stop during
    the exchange records its verdict in the JUnit with them (a peer's death, say)."""
    logged: bool = False
    """Its own reports are in the JUnit file already."""
    start: float = 0.0
    """time.monotonic() when it began: a stop's record of it keeps its duration."""
    group_trouble: bool = False
    """Its attempt lost or broke this rank's process group (a new one follows)."""

    def begin(self, item: pytest.Item) -> None:
        self.item, self.attempt, self.own, self.logged = item, 1, None, False
        self.start, self.group_trouble = time.monotonic(), False


def shows_verdict(step):
    """Marks a round's step that writes the test's verdict into the rank's files or
    terminal: ``StopGate.run`` runs it under the verdict lock, and not once a stop began."""
    step.shows_verdict = True
    return step


class StopGate:
    """Between the main thread's steps and the watchers' stops: one of them records a
    test, never both."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claimed = False
        self.begun = threading.Event()
        """Set when a thread decides to stop the run, before it asks the store anything:
        the main thread then parks instead of going on (a new group's rendezvous with a
        peer that left blocks in C++ holding the GIL, which would freeze the watchers
        until the launcher's SIGKILL)."""
        self.verdict_lock = threading.Lock()
        """Held while the main thread writes a test's verdict and while a watcher takes
        the current test over: one of them reports it, never both."""

    def claim(self) -> bool:
        """True for the one thread (a watcher, or the main thread after a peer's death)
        that records this rank's stop."""
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def begin(self) -> None:
        """A thread stops the run: from now on the main thread writes no verdict."""
        with self.verdict_lock:
            self.begun.set()

    def run(self, step: Step) -> Step | None:
        """One step of the main thread's round; after it, park if a watcher began a stop
        meanwhile. A step that writes the verdict (``shows_verdict``) runs under the
        verdict lock, and not at all once a stop has begun."""
        if getattr(step, "shows_verdict", False):
            with self.verdict_lock:
                following = None if self.begun.is_set() else step()
        else:
            following = step()
        self.park_if_stopping()
        return following

    def park_if_stopping(self) -> None:
        """A watcher thread records this test and ends the process: wait for that."""
        if self.begun.is_set():
            threading.Event().wait()

    def stay(self) -> None:
        """The calling thread lost the claim: the one that won records and exits."""
        threading.Event().wait()
