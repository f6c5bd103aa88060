"""Lock files a stopped rank held: listed, and removed where only the dead rank's process
made them a lock.

Some locks are a file's existence: torch's ``FileBaton`` (torch_extensions'
``.../<op>/lock``, taken while a C++ op builds) creates the file with ``O_EXCL`` and
deletes it when done. A rank killed while holding one leaves it behind, and every later
process that builds the op waits on it for ever. Others are kernel locks (``fcntl`` or
``flock``, as ``filelock`` takes them): they end with their process, and the file left
behind is harmless. A rank that is stopped (hung, past a timeout) is looked at before it
is killed: each lock file it holds open is named, and existence locks are removed once
their owner is gone. Linux's ``/proc`` only; elsewhere nothing is found. Standard
library only.
"""

from __future__ import annotations

import os
from pathlib import Path

LOCK_NAMES = ("lock",)
"""Base names of lock files (``lock``, and any ``*.lock``)."""


def held(pids) -> list[tuple[int, Path]]:
    """(pid, path) of each lock file the processes hold open."""
    found = []
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            links = list(fd_dir.iterdir())
        except OSError:
            continue
        for link in links:
            try:
                target = Path(os.readlink(link))
            except OSError:
                continue
            if _is_lock_file(target) and (pid, target) not in found:
                found.append((pid, target))
    return found


def _is_lock_file(path: Path) -> bool:
    return path.is_absolute() and (path.name in LOCK_NAMES or path.suffix == ".lock")


def kernel_lock_holders(path: Path) -> set[str] | None:
    """The pids (as /proc/locks writes them) holding a kernel lock (fcntl, flock) on
    ``path``; None where that cannot be read."""
    try:
        st = os.stat(path)
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    # /proc/locks names a file as major:minor:inode, the device numbers in hex
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = set()
    for line in text.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's has "->" after "1:"
        if len(fields) >= 6 and fields[1] != "->" and fields[5] == ident:
            holders.add(fields[4])
    return holders


def kernel_locked(path: Path, pid: int) -> bool:
    """Whether ``pid`` holds a kernel lock (fcntl, flock) on ``path``: it ends with it."""
    return str(pid) in (kernel_lock_holders(path) or ())


def survey(pids) -> list[tuple[Path, bool]]:
    """The lock files the processes hold: (path, whether it is a kernel lock)."""
    return [(path, kernel_locked(path, pid)) for pid, path in held(pids)]


def release(found: list[tuple[Path, bool]], pids) -> str:
    """After the processes ended: remove the existence locks they held; one line saying
    what was held and what was done ("" when they held none)."""
    if not found:
        return ""
    alive = [p for p in pids if Path(f"/proc/{p}").exists()]
    words = []
    for path, kernel in found:
        if kernel:
            words.append(f"{path} (a kernel lock: it ended with the rank)")
        elif alive:
            words.append(f"{path} (left in place: the rank's process is still running)")
        else:
            try:
                path.unlink()
                words.append(f"{path} (removed: the rank that held it was stopped, and it would "
                             "hold every later run that takes it)")
            except FileNotFoundError:
                words.append(f"{path} (gone already)")
            except OSError as exc:
                words.append(f"{path} (could not remove it: {exc}; remove it by hand)")
    return "lock files the stopped ranks held: " + "; ".join(words)
