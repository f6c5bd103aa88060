"""A check that the test run cleans up: rankgate-* folders left in the temp dir fail it.

Loaded by the project's conftest. The run (and every process it starts: ranks,
launchers, pytest runs of its own) gets a private temp dir through TMPDIR, so other
runs on the same machine neither hide a leak nor cause one. At the end, anything in
it named ``rankgate-*`` is a leftover: the run fails, naming each one, and the dir is
kept for a look; a clean run's dir is removed. A run killed before its end (SIGKILL, a
CI timeout) cannot remove its dir: the next run on the machine does, once its owners
are gone.

Under a launcher (torchrun, srun, mpirun) each rank is a pytest process of its own,
and the ranks on one host share one dir: torch's symmetric memory passes file
descriptors over a socket under TMPDIR, and file-based stores live there, so ranks with
different temp dirs cannot reach each other. The dir is named after the launcher's run,
every rank registers as an owner, and local rank 0 (whose terminal the user reads)
waits for the others to leave, then checks and removes it. Nodes that share one file
system (the two-node SLURM of the hpc suites: one machine) share the dir too: of their
local ranks 0, the lowest rank checks, and the others leave as any rank does (two that
waited for each other would each wait out OTHERS_LEAVE_S).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rankgate.harness.leaks import running
from rankgate.launch.env import LaunchEnv, detect_launch

PATTERN = "rankgate-*"
RUN_DIR_PREFIX = "pytest-run-tmp-"
CHECKER_PREFIX = "checker."
"""``checker.<rank>``: a local rank 0 of this run that would check the dir."""
OWNER_PREFIX = "owner."
"""In each run's dir while the run lives: one empty file ``owner.<pid>`` per process that
uses it (one, or every rank of a launcher run on this host), so that a later run can tell
the dir of a killed run (owners gone) from a live run's. A dir kept for a look has none."""
LOCK = ".owners.lock"
OTHERS_LEAVE_S = 120.0
"""How long local rank 0 waits for the other ranks on its host to end their sessions."""
_KEY = pytest.StashKey[Path]()
_CHECKS = pytest.StashKey[bool]()
_LEFT = pytest.StashKey[list]()
_RANK = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: its controller owns the dir
        return
    parent = Path(tempfile.gettempdir())
    remove_dirs_of_killed_runs(parent)
    launch = detect_launch()
    private = join_run_dir(parent, launch)
    config.stash[_KEY] = private
    config.stash[_CHECKS] = launch is None or launch.local_rank == 0
    if launch is not None and launch.local_rank == 0:
        (private / f"{CHECKER_PREFIX}{launch.rank}").touch()
        config.stash[_RANK] = launch.rank
    os.environ["TMPDIR"] = str(private)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def run_dir_name(launch: LaunchEnv | None) -> str | None:
    """The shared dir's name for the ranks of one launcher run; None outside a launcher.

    The launcher's job id alone can repeat (torchrun's default run id is "none"), so
    the rendezvous address, unique among live runs, goes into the name too.
    """
    if launch is None:
        return None
    where = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
    digest = hashlib.sha1(f"{launch.launcher}|{launch.job_id}|{where}".encode()).hexdigest()
    return f"{RUN_DIR_PREFIX}{launch.launcher}-{digest[:16]}"


def join_run_dir(parent: Path, launch: LaunchEnv | None) -> Path:
    """Make (or, as a further rank of a launcher run, join) the run's dir; own it."""
    name = run_dir_name(launch)
    if name is None:
        private = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX, dir=parent))
    else:
        private = parent / name
        private.mkdir(exist_ok=True)
    with contextlib.suppress(PermissionError):  # a rank that did not make it
        private.chmod(0o1777)  # as /tmp: some tests run commands as another user
    with _owners_locked(private):
        (private / f"{OWNER_PREFIX}{os.getpid()}").touch()
    return private


def leave_run_dir(private: Path) -> None:
    with _owners_locked(private):
        (private / f"{OWNER_PREFIX}{os.getpid()}").unlink(missing_ok=True)


def others_left(private: Path, timeout: float = OTHERS_LEAVE_S) -> bool:
    """Wait until no other process owns the dir; False if some still do at ``timeout``."""
    deadline = time.monotonic() + timeout
    while [pid for pid in live_owners(private) if pid != os.getpid()]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@contextlib.contextmanager
def _owners_locked(private: Path):
    """Ranks add and remove their owner files one at a time."""
    with open(private / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def checker_ranks(run_dir: Path) -> list[int]:
    """The ranks of the local ranks 0 that share ``run_dir``."""
    return _numbers_named(run_dir, CHECKER_PREFIX)


def owners(run_dir: Path) -> list[int]:
    return _numbers_named(run_dir, OWNER_PREFIX)


def _numbers_named(run_dir: Path, prefix: str) -> list[int]:
    """N of each file ``<prefix>N`` in ``run_dir``."""
    found = []
    for path in run_dir.glob(f"{prefix}*"):
        with contextlib.suppress(ValueError):
            found.append(int(path.name.removeprefix(prefix)))
    return found


def live_owners(run_dir: Path) -> list[int]:
    return [pid for pid in owners(run_dir) if running(pid)]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    private = session.config.stash.get(_KEY, None)
    if private is None:
        return
    warm = sys.modules.get("tests.warmstart")  # the root conftest.py imports it, if it ran
    if warm is not None:
        warm.WARM_PYTHON.stop()  # its fork server's folder goes with the session, not at exit
    checks = session.config.stash[_CHECKS]  # else another rank of this run on this host checks
    rank = session.config.stash.get(_RANK, None)
    if checks and rank is not None:  # every rank joined before the first test ran
        checks = rank == min(checker_ranks(private))
    others_gone = checks and others_left(private)
    leave_run_dir(private)
    if not others_gone:
        session.config.stash[_KEY] = None
        if checks:
            print(f"leftovers: other ranks still use {private} after {OTHERS_LEAVE_S:g} s: not checked")
        return
    left = sorted(p.name for p in private.glob(PATTERN) if p.is_dir())
    session.config.stash[_LEFT] = left
    if left and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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


def remove_dirs_of_killed_runs(parent: Path) -> None:
    """Remove the run dirs in ``parent`` all of whose owner processes are gone.

    A dir with no owner file is left alone: one kept for a look, one a rank is just
    making, or not one of ours.
    """
    for run_dir in sorted(parent.glob(f"{RUN_DIR_PREFIX}*")):
        if owners(run_dir) and not live_owners(run_dir):
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
