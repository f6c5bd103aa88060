"""Which fork server (:mod:`.forkclient`) a pool session forks its ranks from.

One per process: a session that pytester runs inline inside another (its in-process
runs, hundreds in rankgate's own tests) forks from the same server as the session
around it, where a server of its own would import torch again for a few tests. Under
xdist it is the run's shared server, which the controller owns; otherwise this process
starts it when a session first wants ranks and ends it when its outermost session ends.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from rankgate.harness.pool.forkclient import RunForkServer


class ProcessForkServer:
    """Counts this process's open pool sessions and holds their one fork server."""

    def __init__(self) -> None:
        self._open_sessions = 0
        self._server: RunForkServer | None = None
        self._record_dir: Path | None = None

    def session_opened(self) -> None:
        self._open_sessions += 1

    def server(self, of_xdist_worker: Callable[[], RunForkServer | None]) -> RunForkServer:
        """The server for this process's sessions: the run's under xdist (asked of
        ``of_xdist_worker`` by the first session that wants ranks), else this process's own."""
        if self._server is None:
            self._server = of_xdist_worker()
            if self._server is None:
                self._record_dir = Path(tempfile.mkdtemp(prefix="rankgate-forkserver-"))
                self._server = RunForkServer(self._record_dir, os.getpid())
        return self._server

    def session_closed(self) -> None:
        """A session ended; the last open one ends this process's server (under xdist
        the controller ends the run's)."""
        self._open_sessions = max(0, self._open_sessions - 1)
        if self._open_sessions or self._server is None:
            return
        self._server.stop()
        self._server = None
        if self._record_dir is not None:
            shutil.rmtree(self._record_dir, ignore_errors=True)
            self._record_dir = None


PROCESS_FORK_SERVER = ProcessForkServer()
