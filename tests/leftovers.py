"""A check that the test run cleans up: rankgate-* folders left in the temp dir fail it.

Loaded by the project's conftest. The run (and every process it starts: ranks,
launchers, pytest runs of its own) gets a private temp dir through TMPDIR, so other
runs on the same machine neither hide a leak nor cause one. At the end, anything in
it named ``rankgate-*`` is a leftover: the run fails, naming each one, and the dir is
kept for a look; a clean run's dir is removed. A run killed before its end (SIGKILL, a
CI timeout) cannot remove its dir: the next run on the machine does, once its owner is
gone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from rankgate.harness.leaks import running

PATTERN = "rankgate-*"
RUN_DIR_PREFIX = "pytest-run-tmp-"
OWNER = "owner.pid"
"""In each run's dir while the run lives: its pid, so that a later run can tell the dir
of a killed run (owner gone) from a live run's. A dir kept for a look has none."""
_KEY = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: its controller owns the dir
        return
    remove_dirs_of_killed_runs(Path(tempfile.gettempdir()))
    private = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX))
    private.chmod(0o1777)  # as /tmp: some tests run commands as another user
    (private / OWNER).write_text(str(os.getpid()))
    config.stash[_KEY] = private
    os.environ["TMPDIR"] = str(private)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    private = session.config.stash.get(_KEY, None)
    if private is None:
        return
    left = sorted(p.name for p in private.glob(PATTERN))
    session.config.stash[_LEFT] = left
    if left and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_LEFT = pytest.StashKey[list]()


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    private = config.stash.get(_KEY, None)
    left = config.stash.get(_LEFT, [])
    if private is None:
        return
    if left:
        (private / OWNER).unlink(missing_ok=True)  # kept for a look, not for the next run
        terminalreporter.section("leftover temp folders", sep="=", red=True)
        terminalreporter.write_line(
            f"the run left {len(left)} {PATTERN} folder(s) in its temp dir {private}: "
            + ", ".join(left)
        )
    else:
        remove_at_exit(private)


def remove_dirs_of_killed_runs(parent: Path) -> None:
    """Remove the run dirs in ``parent`` whose owner process is gone."""
    for run_dir in sorted(parent.glob(f"{RUN_DIR_PREFIX}*")):
        try:
            owner = int((run_dir / OWNER).read_text())
        except (OSError, ValueError):
            continue  # a dir kept for a look, or not one of ours
        if not running(owner):
            shutil.rmtree(run_dir, ignore_errors=True)


def remove_at_exit(private: Path) -> None:
    """Remove the run's temp dir once multiprocessing has removed its own dir in it.

    multiprocessing keeps a ``pymp-*`` dir in the temp dir and removes it at interpreter
    exit (finalizer priority -100); removing ours first made that finalizer fail with a
    traceback. A finalizer of lower priority runs after it.
    """
    from multiprocessing import util

    util.Finalize(None, shutil.rmtree, args=(str(private),), kwargs={"ignore_errors": True},
                  exitpriority=-101)  # fmt: skip
