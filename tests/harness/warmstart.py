"""The warm ``python`` of this test process: a program that starts the Python programs a
test launches (torchrun's ranks, inner pytest sessions) forked from a server with torch
and pytest imported (:mod:`warmserver`, one per test process, started on first use, ended
with the process). A rank started so runs the same pytest session as one started cold:
its arguments, folder, environment, standard streams, signal dispositions, exit code or
signal. What differs: /proc shows the server's command line and first environment for
it, its parent is the server, and it shares the server's hash seed. What it cannot be
given (a variable the interpreter or torch reads at import set differently, Python
options beyond ``-u``) makes it start cold (:func:`warmserver.cold_reason`).

``RANKGATE_TESTS_COLD=1`` turns it off: every program starts cold.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from warmserver import socket_name

HERE = Path(__file__).resolve().parent


class WarmPython:
    """The server of this process and the executable that reaches it."""

    def __init__(self) -> None:
        self._folder: Path | None = None
        self._server: subprocess.Popen | None = None

    def executable(self) -> str:
        """The path of the warm ``python`` (``sys.executable`` when turned off)."""
        if os.environ.get("RANKGATE_TESTS_COLD") == "1" or any(c.isspace() for c in sys.executable):
            return sys.executable  # off, or a path a #! line cannot hold
        if self._server is None or self._server.poll() is not None:
            self._start()
        return str(self._folder / "python")

    def _start(self) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="warm-python-"))
        address = socket_name(str(self._folder))
        self._server = subprocess.Popen(
            [sys.executable, str(HERE / "warmserver.py"), str(self._folder), "--owner",
             str(os.getpid())],
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        launcher = self._folder / "python"
        launcher.write_text(
            f"#!{sys.executable} -IS\n"
            f"import sys\nsys.path.insert(0, {str(HERE)!r})\nimport warmclient\n"
            f"warmclient.main({address!r}, {sys.executable!r})\n"
        )
        launcher.chmod(0o755)
        # Not waited for: until it listens (after its import of torch, about 2 s), the
        # programs launched start cold.
        atexit.register(self.stop)

    def wait_until_warm(self, timeout_s: float) -> None:
        """Wait until the server listens (programs launched before start cold)."""
        deadline = time.monotonic() + timeout_s
        while not (self._folder / "ready").exists():
            if self._server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the warm server did not start (exit {self._server.poll()})")
            time.sleep(0.05)

    def stop(self) -> None:
        if self._server is not None:
            self._server.kill()
            self._server.wait()
            self._server = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


WARM_PYTHON = WarmPython()
