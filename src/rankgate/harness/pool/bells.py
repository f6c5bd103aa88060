"""One write wakes every rank of a pool for its next message.

The controller writes a test to each rank's pipe, then rings a bell: the ranks wait on the
bell, not on their pipes, so the writes wake no one and the ring wakes them all in one
system call. Woken one by one (a write to each pipe), the rank woken first could preempt
the controller on its core before the controller reached the next rank's pipe; that rank
then started the test late while the first waited for it in the test's first collective
(two ranks on 2 cores: 80-284 us apart at the median, benchmarks/results/cpu/
batch-wait-2026-11-30/). The ranks keep their scheduling as it is.

The bells are two named pipes in the pool's folder, rung in turn. The controller empties
a message's bell once every rank has answered it, and by then the ranks wait on the other
bell: none finds the last message's ring. The controller holds each bell open for writing
as long as it lives, so its end wakes every waiting rank too (the pipe hangs up).
"""

from __future__ import annotations

import os
import select
from pathlib import Path

NAMES = ("bell0", "bell1")


def make(directory: Path) -> None:
    """Make the bells in a pool's folder (before its ranks start)."""
    for name in NAMES:
        path = directory / name
        path.unlink(missing_ok=True)
        os.mkfifo(path, 0o600)


class Belfry:
    """The controller's side: rings the bell of the next message, then empties it."""

    def __init__(self, directory: Path) -> None:
        # Read and write: the open does not wait for a reader, and the controller can
        # empty a bell it rang.
        self._fds: list[int] = []
        try:
            for name in NAMES:
                self._fds.append(os.open(directory / name, os.O_RDWR | os.O_NONBLOCK))
        except BaseException:
            self.close()
            raise
        self._next = 0

    def ring(self) -> None:
        """Wake every rank: its message is in its pipe."""
        os.write(self._fds[self._next], b"\0")

    def answered(self) -> None:
        """Every rank answered the message just rung: empty its bell; ring the other next."""
        try:
            os.read(self._fds[self._next], 1)
        except BlockingIOError:
            pass
        self._next ^= 1

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


class BellRope:
    """A rank's side: waits for the ring of its next message."""

    def __init__(self, directory: Path) -> None:
        self._polls = []
        for name in NAMES:
            fd = os.open(directory / name, os.O_RDONLY | os.O_NONBLOCK)
            poll = select.poll()
            poll.register(fd, select.POLLIN)  # a hang-up (the controller gone) wakes it too
            self._polls.append(poll)
        self._next = 0

    def wait(self) -> None:
        """Return once the next message's bell rang (or its controller is gone)."""
        while not self._polls[self._next].poll():
            pass
        self._next ^= 1
