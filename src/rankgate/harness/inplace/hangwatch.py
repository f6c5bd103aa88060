"""In-place mode's hang watch: a rank whose test outlives its timeout prints its stacks and exits.

Every rank of a launched job shares the launcher's stderr, and the ranks of a hung
collective time out together. faulthandler writes a dump in many small pieces, so two
ranks dumping at once tear each other's lines apart. Here a watcher thread takes the
dump into memory first, then writes it line by line, each line labelled with the rank
in one ``write`` (at most PIPE_BUF bytes, so a pipe never splits it), hands the stacks
to ``on_timeout`` (in-place mode records the hung test in the rank's JUnit file), and
exits.

The watcher needs the GIL. Should the test hold it forever (a C call that never
releases it), faulthandler's own watchdog, which needs no GIL, dumps and exits
``FALLBACK_S`` later, unlabelled.
"""

from __future__ import annotations

import faulthandler
import os
import select
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TextIO

from rankgate.harness import ledger

FALLBACK_S = 10.0
PEER_POLL_S = 0.25
"""How often a running test's rank asks whether a peer failed the same test."""
PEER_GRACE_S = 3.0
"""After a peer failed, how long this rank's test may go on before it is stopped (a
peer that failed before a collective leaves this rank waiting in it for ever)."""
LINE_LIMIT = select.PIPE_BUF if hasattr(select, "PIPE_BUF") else 512


class HangWatch:
    """Arms and disarms the timeout of one test at a time on one rank."""

    def __init__(self, rank: int, stream: TextIO) -> None:
        """``stream``: the rank's real stderr, kept from before pytest's capture."""
        self.rank = rank
        self.stream = stream
        self._disarmed: threading.Event | None = None

    def arm(
        self,
        timeout: float,
        fallback_s: float = FALLBACK_S,
        on_timeout: Callable[[str, str], None] | None = None,
        peer_failed: Callable[[], str | None] | None = None,
        what: str = "the test's timeout",
    ) -> None:
        """Start watching; at the timeout print, call ``on_timeout(stacks, why)``, exit.

        ``peer_failed()`` (polled) names a peer that failed this test, e.g. "rank 1
        failed"; from then on the test gets PEER_GRACE_S more at most.
        """
        self.disarm()
        self._disarmed = disarmed = threading.Event()
        watcher = threading.Thread(
            target=self._watch,
            args=(timeout, disarmed, on_timeout, peer_failed, what),
            name="rankgate-hang-watch",
            daemon=True,
        )
        watcher.start()
        faulthandler.dump_traceback_later(timeout + fallback_s, exit=True, file=self.stream)

    def disarm(self) -> None:
        if self._disarmed is not None:
            self._disarmed.set()
            self._disarmed = None
        faulthandler.cancel_dump_traceback_later()

    def _watch(
        self, timeout: float, disarmed: threading.Event, on_timeout, peer_failed, what: str
    ) -> None:
        deadline = time.monotonic() + timeout
        why = f"did not finish within {what} of {timeout:g} s"
        header = f"Timeout ({timedelta(seconds=timeout)})!"
        while (remaining := deadline - time.monotonic()) > 0:
            if disarmed.wait(min(remaining, PEER_POLL_S) if peer_failed else remaining):
                return
            failed = peer_failed() if peer_failed and header.startswith("Timeout") else None
            if failed and deadline > time.monotonic() + PEER_GRACE_S:
                deadline = time.monotonic() + PEER_GRACE_S
                why = f"was still running {PEER_GRACE_S:g} s after {failed}"
                header = f"Stopped: {why}!"
        with tempfile.TemporaryFile("w+") as dump:
            faulthandler.dump_traceback(file=dump, all_threads=True)
            dump.seek(0)
            # Blocks of one thread each; the current one is this watcher, of no interest.
            blocks = dump.read().strip().split("\n\n")
        stacks = [
            line
            for block in blocks
            if not block.startswith("Current thread")
            for line in [*without_pytest_frames(block.splitlines()), ""]
        ]
        self.stream.flush()
        label = f"[rank {self.rank}] "
        lines = [f"{header} Python stacks of every thread:"]
        for line in lines + stacks:
            self._write_line(label + line)
        if on_timeout is not None:
            try:  # the stacks are out already; whatever fails here must not stop the exit
                on_timeout("\n".join(stacks), why)
            except Exception as exc:
                self._write_line(f"{label}could not record the hang: {exc!r}")
        for stream in (sys.stdout, sys.stderr):  # os._exit skips Python's own flush
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(1)

    def write(self, line: str) -> None:
        """One line to the rank's real stderr, in one write."""
        self._write_line(line)

    def _write_line(self, line: str) -> None:
        data = line[: LINE_LIMIT - 1].encode(errors="replace")[: LINE_LIMIT - 1]
        os.write(self.stream.fileno(), data + b"\n")


PYTEST_FRAMES = ("/_pytest/", "/pluggy/")
"""Frames of pytest's runner under a test's own: the same for every test, as the pool's
stacks leave out its worker's."""


def without_pytest_frames(block: list[str]) -> list[str]:
    """One thread's stack (most recent call first) down to the first pytest frame: that
    frame and every one below it are pytest running the test (and rankgate's hooks).
    The ledger's wrapper frame goes too (:func:`ledger.without_wrapper_frames`)."""
    block = ledger.without_wrapper_frames(block)
    for i, line in enumerate(block):
        if line.startswith('  File "') and any(part in line for part in PYTEST_FRAMES):
            return [*block[:i], "  (pytest frames omitted)"]
    return block
