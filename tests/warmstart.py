"""The warm ``python`` of this test process: a program that starts the Python programs a
test launches (torchrun's ranks, inner pytest sessions) forked from a fork server of
rankgate's own (:mod:`rankgate.harness.pool.forkserver`, one per test process, started
on first use, ended with the process), as xdist's workers start under rankgate. A
program started so runs as one started cold (:mod:`rankgate.harness.pool.program`): its
arguments, folder, environment, standard streams, signal dispositions, exit code or
signal. What it cannot be given (a variable the interpreter or torch reads at import set
differently, Python options beyond ``-u`` and ``-B``) makes it start cold.

``RANKGATE_TESTS_COLD=1`` turns it off: every program starts cold. So does a run in place
(conftest.py): there every test runs in a rank that fails a test which leaves a process
running, and the server a test started would be one.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from rankgate.harness.pool.forkclient import SERVER_PYTHON_ENV, ForkServerError, RunForkServer


class WarmPython:
    """The fork server of this process and the executable that reaches it."""

    def __init__(self) -> None:
        self._server: RunForkServer | None = None
        # The server starts as a test first asks for it, under that test's environment
        # (a monkeypatched CUDA_VISIBLE_DEVICES, say) and would keep it as its own: every
        # later launch with the process's own value then started cold. It starts under
        # the environment this process had when it was made, before any test ran.
        self._env = dict(os.environ)
        self._parent: RunForkServer | None = None
        self._off = os.environ.get("RANKGATE_TESTS_COLD") == "1"

    def turn_off(self) -> None:
        """Every program starts cold from now on."""
        self._off = True

    def fork_from(self, server: RunForkServer) -> None:
        """Start the server, when a test first asks for it, forked from ``server`` (an
        xdist worker's run has one, torch imported): not from a cold ``import torch``,
        ~2 CPU-s and seconds in which the programs launched start cold."""
        self._parent = server

    def executable(self) -> str:
        """The path of the warm ``python`` (``sys.executable`` when turned off). A server
        started now is waited for: a program launched before it listens starts cold,
        importing torch beside the server's own import (each xdist worker's first launch
        did, its server forked from the run's a moment too late)."""
        if self._off:
            return sys.executable
        started = self._server is None or self._server.owner != os.getpid()
        if started:
            env = dict(self._env)
            parent = self._parent.python() if self._parent is not None else None
            if parent and SERVER_PYTHON_ENV not in env:
                env[SERVER_PYTHON_ENV] = parent
            folder = Path(tempfile.mkdtemp(prefix="warm-python-"))
            self._server = RunForkServer(folder, os.getpid(), env=env)
            atexit.register(self.stop)
        python = self._server.python() or sys.executable  # restarted if it died
        if started:
            try:
                self._server.ready()
            except ForkServerError:
                pass  # its programs start cold
        # The pytest sessions a test starts start their own fork servers forked from this
        # one (torch imported), not cold.
        os.environ[SERVER_PYTHON_ENV] = python
        return python

    def stop(self) -> None:
        os.environ.pop(SERVER_PYTHON_ENV, None)
        if self._server is not None and self._server.owner == os.getpid():
            self._server.stop()
            shutil.rmtree(self._server.directory, ignore_errors=True)
        self._server = None


WARM_PYTHON = WarmPython()
