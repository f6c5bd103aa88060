"""Starting pytest under torchrun in a test's folder, and ending a run a test started,
whatever the run left behind."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from rankgate.launch.launchers import launcher_argv
from tests.warmstart import WARM_PYTHON


def torchrun_pytest_cmd(*pytest_args: str, ranks: int = 2) -> list[str]:
    """The command starting ``ranks`` ranks on this host with torchrun, each running
    ``pytest -p no:cacheprovider *pytest_args`` (no cache left in the test's folder).
    torchrun and its ranks start from this process's warm ``python`` (:mod:`warmstart`)."""
    start = launcher_argv("torchrun", ranks, python=WARM_PYTHON.executable())
    return [*start, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args]


def run_torchrun_pytest(
    folder: Path,
    *pytest_args: str,
    ranks: int = 2,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run :func:`torchrun_pytest_cmd` in ``folder`` to its end; its output as text."""
    cmd = torchrun_pytest_cmd(*pytest_args, ranks=ranks)
    return subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


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
