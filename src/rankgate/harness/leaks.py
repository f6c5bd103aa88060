"""Processes a test left running: found after the test, named in its report, ended.

A child started with ``start_new_session=True`` escapes the kill of the rank's
process group, and any child outlives a test on a reused rank. After each test
the rank lists its children that are still running (orphaned grandchildren too:
the rank is made their subreaper, so they are re-parented to it rather than to
init), ends them, and the test fails with their names.

Standard library only (imported inside rank processes). Linux: reads /proc; on
other systems nothing is found.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import signal
import time

PR_SET_CHILD_SUBREAPER = 36
EXIT_WAIT_S = 1.0
"""Time a child gets to finish on its own after the test (a process being shut down)."""
TERM_WAIT_S = 2.0


def become_subreaper() -> None:
    """Orphaned descendants of this process are re-parented to it (Linux >= 3.4)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def children(pid: int | None = None) -> dict[int, str]:
    """Running (not zombie) children of ``pid`` (default: this process): pid -> state."""
    pid = os.getpid() if pid is None else pid
    listed = _listed_children(pid)
    candidates = listed if listed is not None else _scan_for_children(pid)
    found = {}
    helpers = _interpreter_helpers() if pid == os.getpid() else set()
    for child in candidates:
        if child in helpers:
            continue
        state_and_parent = _state_and_parent(child)
        if state_and_parent and state_and_parent[1] == pid and state_and_parent[0] != "Z":
            found[child] = state_and_parent[0]
    return found


def _interpreter_helpers() -> set[int]:
    """multiprocessing's resource tracker and fork server of this interpreter: started on
    first use (a test writing a checkpoint with a process pool) and meant to live as long
    as the interpreter, so not something a test left running."""
    import sys

    pids = set()
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    forkserver = sys.modules.get("multiprocessing.forkserver")
    for holder, attr in (
        (getattr(tracker, "_resource_tracker", None), "_pid"),
        (getattr(forkserver, "_forkserver", None), "_forkserver_pid"),
    ):
        pid = getattr(holder, attr, None)
        if isinstance(pid, int):
            pids.add(pid)
    return pids


def _listed_children(pid: int) -> list[int] | None:
    """The kernel's own list (/proc/PID/task/*/children), or None where it has none.

    Read with os-level calls: a rank on NCCL has about 40 threads, and Python's buffered
    text files made this check 0.3 ms of every test on 2 cores (0.09 ms so)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        found = []
        for task in tasks:
            found += [int(c) for c in _read_all(f"/proc/{pid}/task/{task}/children").split()]
        return found
    except OSError:
        return None


def _read_all(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _scan_for_children(pid: int) -> list[int]:
    try:
        return [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []


def _stat_after_comm(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the state on (its third field), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    return stat[stat.rindex(")") + 2 :].split()


def _state_and_parent(pid: int) -> tuple[str, int] | None:
    fields = _stat_after_comm(pid)
    return None if fields is None else (fields[0], int(fields[1]))


def started(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot), None if it is gone. With the pid, a
    process's identity: once a process is reaped its pid can name another one, which a
    later signal to that pid alone would hit."""
    fields = _stat_after_comm(pid)
    return None if fields is None else int(fields[19])  # field 22, starttime


def running(pid: int) -> bool:
    """Whether ``pid`` runs: it exists and is not a zombie (dead, not yet reaped)."""
    found = _state_and_parent(pid)
    return found is not None and found[0] != "Z"


def describe(pid: int) -> str:
    """'pid 123 (sleep 1000), in its own session' for a report."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        command = "?"
    where = ""
    try:
        if os.getsid(pid) != os.getsid(0):
            where = ", in its own session"
    except OSError:
        pass
    return f"pid {pid} ({command[:200]}){where}"


def reap(pids: list[int]) -> None:
    """Collect those of ``pids`` that exited, so they do not stay as zombies."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


_WALL = 0x40000000
"""Linux's __WALL: wait for every kind of child (os does not name it)."""


def childless() -> bool:
    """Whether this process has no child at all, running or exited: one ``waitid`` that
    reaps nothing, where :func:`children` reads a file per thread (about 40 on NCCL) of
    every test. False when it has one, or where this cannot be asked."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT | _WALL)
    except ChildProcessError:
        return True  # ECHILD: nothing to wait for
    except (OSError, AttributeError):  # no waitid, or a kernel before 4.7 (__WALL)
        return False
    return False


def end_leftovers(before: set[int]) -> list[str]:
    """End the children started since ``before`` was taken; return their descriptions."""
    if childless():
        return []  # the usual case: no child, so none left running
    if not [pid for pid in children() if pid not in before]:
        return []  # the usual case, and cheap: no garbage collection per test
    gc.collect()  # a dropped Popen or pool may still be shutting its processes down
    deadline = time.monotonic() + EXIT_WAIT_S
    while True:
        left = [pid for pid in children() if pid not in before]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    names = [describe(pid) for pid in left]
    for sig, wait in ((signal.SIGTERM, TERM_WAIT_S), (signal.SIGKILL, 1.0)):
        for pid in left:
            _signal_tree(pid, sig)
        deadline = time.monotonic() + wait
        while left and time.monotonic() < deadline:
            reap(left)
            running = children()
            left = [pid for pid in left if pid in running]
            time.sleep(0.02)
        if not left:
            break
    return names


LEFT_RUNNING = "rankgate: the test left processes running; they were ended: "
"""How a rank's failure of a test that left processes running begins its line."""
_FIX = ". End what a test starts (Popen.terminate() and wait(), or a fixture's teardown)"


def left_running_problem(names: list[str]) -> str:
    """The failure's line naming the processes a test left running (``end_leftovers``)."""
    return LEFT_RUNNING + "; ".join(names) + _FIX


def left_running_in(text: str) -> str:
    """'pid 123 (sleep 1000)' from a rank's failure text: the processes its test left
    running, for the verdict's headline ('' when none)."""
    start = text.find(LEFT_RUNNING)
    if start < 0:
        return ""
    rest = text[start + len(LEFT_RUNNING) :]
    end = rest.find(_FIX)
    return rest[:end] if end >= 0 else rest.split("\n", 1)[0]


def _signal_tree(pid: int, sig: int) -> None:
    """Signal ``pid`` and, when it leads its own process group, the whole group."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
            return
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
