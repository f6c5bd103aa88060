"""Machine-wide GPU leases: a world test holds its GPUs while it sets up and runs.

A lease is an exclusive ``flock`` on one file per GPU in a directory every pytest
process on the machine shares (xdist workers, and other runs too). The kernel drops a
lock when its holder dies, so a killed run never leaves a GPU taken. GPUs are locked
in one global order, so two tests that want overlapping GPUs never deadlock: the
later one waits.

A holder notes beside the lock (``gpu-N.holder``) its pid, its test and until when it
may hold the GPU: its attempts' pool starts and timeouts, and a margin. A test waits as
long as the holder is within that time, however long; a holder past it is stuck, or was
left behind by a stopped run, and the waiting test errors naming it, never waiting
without end or word.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from rankgate.harness.locks import kernel_lock_holders

POLL_S = 0.02
"""A waiter retries the lock this often, reading the holder's note in between."""

LEASE_DIR_ENV = "RANKGATE_GPU_LEASE_DIR"
"""Where the lease files live; default /dev/shm/rankgate-gpu-leases (or /tmp's)."""


def lease_dir() -> Path:
    explicit = os.environ.get(LEASE_DIR_ENV)
    if explicit:
        return Path(explicit)
    # Not the temp dir: TMPDIR differs between runs, and leases must be machine-wide.
    root = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    return Path(root) / "rankgate-gpu-leases"


@functools.lru_cache(maxsize=1024)
def _file_name(gpu: str) -> str:
    """A CUDA_VISIBLE_DEVICES entry (an index or a UUID) as a file name."""
    return "gpu-" + re.sub(r"[^A-Za-z0-9._-]", "_", gpu.strip())


@functools.lru_cache(maxsize=1024)
def _lock_and_note(directory: str, gpu: str) -> tuple[str, str]:
    """The lock file of ``gpu`` in ``directory`` and its holder's note, as plain strings:
    made once, where pathlib built them anew (half the lease's time) at every test."""
    lock = os.path.join(directory, _file_name(gpu))
    return lock, lock + ".holder"


def _make_shared_dir(directory: Path) -> None:
    if not os.path.isdir(directory):  # os.path: one stat, a test's lease asks it each time
        directory.mkdir(parents=True, exist_ok=True)
        try:
            directory.chmod(0o1777)  # as /tmp: every user's runs lease here
        except PermissionError:
            pass  # another user made it a moment ago


class GpuHeldTooLong(RuntimeError):
    """The GPU's holder is past the time it took the GPU for."""


def command_line(pid: str) -> str:
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
        self._notes: list[str] = []
        self.waited_s = 0.0
        """How long the last ``acquire`` waited for other holders."""

    def acquire(self, holds_for_s: float | None = None, what: str = "") -> None:
        """Wait until every GPU is free and take them, noting ``what`` takes them for at
        most ``holds_for_s`` (None: no note, no limit). GpuHeldTooLong when a holder is
        past its own time; nothing is held then."""
        if self._files:
            raise RuntimeError(f"GPUs {', '.join(self.gpus)} are already leased here")
        _make_shared_dir(self.directory)
        started = time.monotonic()
        directory = os.fspath(self.directory)
        try:
            for gpu in self.gpus:
                # Read-only is enough to lock, and opens a file another user made.
                path, note = _lock_and_note(directory, gpu)
                fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
                self._files.append(fd)
                _lock(fd, path, gpu)
                if holds_for_s is not None:
                    self._note(note, holds_for_s, what)
        except BaseException:
            self.release()  # a signal or a stuck holder while waiting: hold nothing
            raise
        self.waited_s = time.monotonic() - started

    def _note(self, note: str, holds_for_s: float, what: str) -> None:
        text = json.dumps({"pid": os.getpid(), "what": what, "until": time.time() + holds_for_s,
                           "allowed_s": holds_for_s})  # fmt: skip
        part = f"{note}.{os.getpid()}"
        try:
            # os-level calls: a note per GPU per test, on the pool's per-test path
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                os.fchmod(fd, 0o666)  # past the umask: another user's waiter reads it
                os.write(fd, text.encode())
            finally:
                os.close(fd)
            os.replace(part, note)  # a waiter reads a whole note or the one before
        except OSError:  # another user's note that this user cannot replace: no limit then
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)
            return
        self._notes.append(note)

    def release(self) -> None:
        while self._notes:  # before the locks: a note never outlives its holder's lock
            try:
                os.unlink(self._notes.pop())
            except FileNotFoundError:
                pass
        while self._files:
            os.close(self._files.pop())  # closing drops the lock

    @property
    def held(self) -> bool:
        return bool(self._files)


def _note_path(path: Path) -> Path:
    return path.with_name(path.name + ".holder")


def _lock(fd: int, path: str, gpu: str) -> None:
    """Lock ``fd``, waiting while its holder is within its time (see the module doc)."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        _raise_if_held_too_long(Path(path), gpu)
        time.sleep(POLL_S)


def _raise_if_held_too_long(path: Path, gpu: str) -> None:
    try:
        note = json.loads(_note_path(path).read_text())
        pid, until = str(note["pid"]), float(note["until"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # no note (a holder that set no limit), or one being replaced
    over = time.time() - until
    if over <= 0:
        return
    holders = kernel_lock_holders(path)
    if holders is not None and pid not in holders:
        return  # a note its holder left when it died: the lock has another holder now
    raise GpuHeldTooLong(
        f"GPU {gpu} is held by pid {pid} ({command_line(pid)}), which took it for "
        f"{note.get('what') or 'a test'} and is {over:.0f} s past the "
        f"{float(note.get('allowed_s', 0)):.0f} s it was given: it is stuck, or a stopped run "
        f"left it behind; end it to free the GPU (lease {path})"
    )
