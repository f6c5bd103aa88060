"""Ending a run a test started, whatever the run left behind."""

from __future__ import annotations

import os
import signal
import subprocess


def end_session(job: subprocess.Popen, timeout_s: float = 30) -> str:
    """Kill ``job`` and every process of its session (it was started with
    ``start_new_session=True``), then return its output.

    A worker or rank the run left behind keeps the output pipe open, and a bare
    ``communicate()`` waits for it without end: on two GPUs such a leftover held its GPU
    leases too, and every later world test of the machine waited behind it.
    """
    try:
        os.killpg(job.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the session has ended
    out, err = job.communicate(timeout=timeout_s)
    return "".join(part.decode(errors="replace") for part in (out, err) if part)
