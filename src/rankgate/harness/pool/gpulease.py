"""Machine-wide GPU leases: a world test holds its GPUs while it sets up and runs.

A lease is an exclusive ``flock`` on one file per GPU in a directory every pytest
process on the machine shares (xdist workers, and other runs too). The kernel drops a
lock when its holder dies, so a killed run never leaves a GPU taken. GPUs are locked
in one global order, so two tests that want overlapping GPUs never deadlock: the
later one waits, at most the test's timeout; then the test errors naming the process
that holds the GPUs (a run stopped with its workers left behind, say), never a silent hang.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

POLL_S = 0.02
"""A bounded wait retries a non-blocking lock this often (flock itself has no timeout)."""

LEASE_DIR_ENV = "RANKGATE_GPU_LEASE_DIR"
"""Where the lease files live; default /dev/shm/rankgate-gpu-leases (or /tmp's)."""


def lease_dir() -> Path:
    explicit = os.environ.get(LEASE_DIR_ENV)
    if explicit:
        return Path(explicit)
    # Not the temp dir: TMPDIR differs between runs, and leases must be machine-wide.
    root = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    return Path(root) / "rankgate-gpu-leases"


def _file_name(gpu: str) -> str:
    """A CUDA_VISIBLE_DEVICES entry (an index or a UUID) as a file name."""
    return "gpu-" + re.sub(r"[^A-Za-z0-9._-]", "_", gpu.strip())


def _make_shared_dir(directory: Path) -> None:
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        try:
            directory.chmod(0o1777)  # as /tmp: every user's runs lease here
        except PermissionError:
            pass  # another user made it a moment ago


class GpuLeaseTimeout(TimeoutError):
    """Other processes held the GPUs for longer than the test may wait."""


def lock_holders(path: Path) -> list[str]:
    """'pid N (command line)' of each process with a flock on ``path``, from Linux's
    /proc/locks; [] where that cannot be read."""
    try:
        st = os.stat(path)
        table = Path("/proc/locks").read_text()
    except OSError:
        return []
    # /proc/locks names a file as major:minor:inode, the device numbers in hex
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = []
    for line in table.splitlines():
        fields = line.split()  # "1: FLOCK ADVISORY WRITE <pid> <ident> 0 EOF"; waiters have "->"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == ident:
            holders.append(f"pid {fields[4]} ({_command_line(fields[4])})")
    return holders


def _command_line(pid: str) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "command unknown"
    words = raw.replace(b"\0", b" ").decode(errors="replace").split()  # one line: -c code
    return " ".join(words)[:200] or "command unknown"


class GpuLease:
    """The GPUs of one test: ``acquire`` waits until every one is free, ``release`` frees."""

    def __init__(self, gpus: Iterable[str], directory: Path | None = None) -> None:
        self.gpus = tuple(sorted(set(gpus), key=_file_name))  # one global locking order
        self.directory = directory or lease_dir()
        self._files: list[int] = []
        self.waited_s = 0.0
        """How long the last ``acquire`` waited for other holders."""

    def acquire(self, timeout_s: float | None = None) -> None:
        """Wait until every GPU is free and take them; GpuLeaseTimeout after ``timeout_s``
        (None: no limit), holding none."""
        if self._files:
            raise RuntimeError(f"GPUs {', '.join(self.gpus)} are already leased here")
        _make_shared_dir(self.directory)
        started = time.monotonic()
        deadline = None if timeout_s is None else started + timeout_s
        try:
            for gpu in self.gpus:
                # Read-only is enough to lock, and opens a file another user made.
                path = self.directory / _file_name(gpu)
                fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
                self._files.append(fd)
                self._lock(fd, path, gpu, started, deadline)
        except BaseException:
            self.release()  # a signal or the time limit while waiting: hold nothing
            raise
        self.waited_s = time.monotonic() - started

    def _lock(self, fd: int, path: Path, gpu: str, started: float, deadline: float | None):
        if deadline is None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits while another test holds it
            return
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            if time.monotonic() >= deadline:
                holders = "; ".join(lock_holders(path)) or "a process /proc/locks does not name"
                raise GpuLeaseTimeout(
                    f"waited {time.monotonic() - started:.1f} s for GPU {gpu} (lease "
                    f"{path}), the test's timeout: held by {holders}"
                )
            time.sleep(POLL_S)

    def release(self) -> None:
        while self._files:
            os.close(self._files.pop())  # closing drops the lock

    @property
    def held(self) -> bool:
        return bool(self._files)
