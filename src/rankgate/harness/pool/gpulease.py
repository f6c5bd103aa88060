"""Machine-wide GPU leases: a world test holds its GPUs while it sets up and runs.

A lease is an exclusive ``flock`` on one file per GPU in a directory every pytest
process on the machine shares (xdist workers, and other runs too). The kernel drops a
lock when its holder dies, so a killed run never leaves a GPU taken. GPUs are locked
in one global order, so two tests that want overlapping GPUs never deadlock: the
later one waits.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

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


class GpuLease:
    """The GPUs of one test: ``acquire`` waits until every one is free, ``release`` frees."""

    def __init__(self, gpus: Iterable[str], directory: Path | None = None) -> None:
        self.gpus = tuple(sorted(set(gpus), key=_file_name))  # one global locking order
        self.directory = directory or lease_dir()
        self._files: list[int] = []
        self.waited_s = 0.0
        """How long the last ``acquire`` waited for other holders."""

    def acquire(self) -> None:
        if self._files:
            raise RuntimeError(f"GPUs {', '.join(self.gpus)} are already leased here")
        _make_shared_dir(self.directory)
        started = time.monotonic()
        try:
            for gpu in self.gpus:
                # Read-only is enough to lock, and opens a file another user made.
                fd = os.open(self.directory / _file_name(gpu), os.O_RDONLY | os.O_CREAT, 0o666)
                self._files.append(fd)
                fcntl.flock(fd, fcntl.LOCK_EX)  # waits while another test holds it
        except BaseException:
            self.release()  # a signal while waiting: hold nothing
            raise
        self.waited_s = time.monotonic() - started

    def release(self) -> None:
        while self._files:
            os.close(self._files.pop())  # closing drops the lock

    @property
    def held(self) -> bool:
        return bool(self._files)
