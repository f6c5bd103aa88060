"""Lock files a stopped rank held: named, and removed where only the file is the lock."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rankgate.harness import locks

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads Linux's /proc"),
]

HOLDER = """
import fcntl, os, sys, time
from torch.utils.file_baton import FileBaton
baton = FileBaton(sys.argv[1])  # an existence lock, as torch_extensions takes it
assert baton.try_acquire()
kernel = open(sys.argv[2], "w")
fcntl.flock(kernel, fcntl.LOCK_EX)  # a kernel lock, as filelock takes it
print("held", flush=True)
time.sleep(600)
"""


def test_a_killed_holders_existence_lock_is_removed_and_its_kernel_lock_named(tmp_path):
    baton, kernel = tmp_path / "op" / "lock", tmp_path / "cache.lock"
    baton.parent.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(baton), str(kernel)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        found = locks.survey([holder.pid])
        assert sorted(found) == [(kernel, True), (baton, False)]
        alive = locks.release(found, [holder.pid])
        assert f"{baton} (left in place: the rank's process is still running)" in alive
        assert baton.exists()
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    note = locks.release(found, [holder.pid])
    assert note.startswith("lock files the stopped ranks held: ")
    assert f"{baton} (removed: the rank that held it was stopped" in note
    assert f"{kernel} (a kernel lock: it ended with the rank)" in note
    assert not baton.exists() and kernel.exists()


def test_nothing_held_says_nothing():
    assert locks.release([], []) == ""
