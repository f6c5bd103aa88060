"""A check that the test run cleans up: rankgate-* folders left in the temp dir fail it.

Loaded by the project's conftest. The run (and every process it starts: ranks,
launchers, pytest runs of its own) gets a private temp dir through TMPDIR, so other
runs on the same machine neither hide a leak nor cause one. At the end, anything in
it named ``rankgate-*`` is a leftover: the run fails, naming each one, and the dir is
kept for a look; a clean run's dir is removed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

PATTERN = "rankgate-*"
_KEY = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: its controller owns the dir
        return
    private = Path(tempfile.mkdtemp(prefix="pytest-run-tmp-"))
    private.chmod(0o1777)  # as /tmp: some tests run commands as another user
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
        terminalreporter.section("leftover temp folders", sep="=", red=True)
        terminalreporter.write_line(
            f"the run left {len(left)} {PATTERN} folder(s) in its temp dir {private}: "
            + ", ".join(left)
        )
    else:
        remove_at_exit(private)


def remove_at_exit(private: Path) -> None:
    """Remove the run's temp dir once multiprocessing has removed its own dir in it.

    multiprocessing keeps a ``pymp-*`` dir in the temp dir and removes it at interpreter
    exit (finalizer priority -100); removing ours first made that finalizer fail with a
    traceback. A finalizer of lower priority runs after it.
    """
    from multiprocessing import util

    util.Finalize(None, shutil.rmtree, args=(str(private),), kwargs={"ignore_errors": True},
                  exitpriority=-101)  # fmt: skip
