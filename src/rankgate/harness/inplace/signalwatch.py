"""In-place mode's signal watch: a stop signal reaches a rank whose main thread may be stuck.

A launcher stops the surviving ranks of a job with SIGTERM when one rank dies
(torchrun does at once), a CI runner or a closed terminal sends SIGTERM or SIGHUP, and
Ctrl-C (or torchrun passing on the SIGINT it got) sends SIGINT. pytest's own answer to
SIGINT, a KeyboardInterrupt, would write a JUnit file holding only the tests that
ended, which reads as a pass.
Python runs a signal handler only when the main thread gets back to bytecode, which a
rank waiting in a collective for a dead peer may never do. So the C-level handler's
wake-up byte goes to a pipe (``signal.set_wakeup_fd``), and a thread reading that pipe
does the work: record the test that was running, write the rank's JUnit file, print
the summary, end the rank's children, exit.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class SignalWatch:
    """Calls ``on_signal(signum)`` from a thread when one of STOP_SIGNALS arrives."""

    def __init__(self, on_signal: Callable[[int], None]) -> None:
        self._on_signal = on_signal
        self._previous: dict[int, object] = {}
        self._previous_fd: int | None = None
        self._pipe: tuple[int, int] | None = None

    def start(self) -> bool:
        """From the main thread; False where signals cannot be watched (not the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        self._pipe = (read_end, write_end)
        self._previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            # A Python-level handler must be installed for the C handler to write the byte;
            # it does nothing itself (the main thread may never run it).
            self._previous[sig] = signal.signal(sig, _noop)
        threading.Thread(target=self._watch, name="rankgate-signal-watch", daemon=True).start()
        return True

    def stop(self) -> None:
        """Give the signals back (the session ended normally)."""
        if self._pipe is None:
            return
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        signal.set_wakeup_fd(self._previous_fd if self._previous_fd is not None else -1)
        os.close(self._pipe[1])  # the watcher reads end-of-file and returns
        self._pipe = None

    def _watch(self) -> None:
        read_end = self._pipe[0]
        while True:
            data = os.read(read_end, 64)
            if not data:
                os.close(read_end)
                return
            for signum in data:
                if signum in STOP_SIGNALS:
                    self._on_signal(signum)
                    return


def _noop(signum, frame) -> None:
    pass
