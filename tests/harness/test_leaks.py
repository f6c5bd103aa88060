"""What counts as a process a test left running."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rankgate.harness import leaks

pytestmark = pytest.mark.unit


def test_the_interpreters_resource_tracker_is_not_a_leftover_but_a_child_is():
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # what a checkpoint writer's process pool starts
    tracker = resource_tracker._resource_tracker._pid
    child = subprocess.Popen(["sleep", "30"])
    try:
        found = leaks.children()
        assert tracker not in found
        assert child.pid in found
    finally:
        child.kill()
        child.wait()


def test_running_is_false_for_a_zombie_and_for_a_reaped_process():
    reader = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    child = subprocess.Popen(reader, stdin=subprocess.PIPE)
    assert leaks.running(child.pid)
    child.stdin.close()
    deadline = time.monotonic() + 10
    while leaks.running(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not leaks.running(child.pid)  # exited, not yet reaped: a zombie
    assert Path(f"/proc/{child.pid}").exists()
    child.wait()
    assert not leaks.running(child.pid)


def test_the_processes_a_test_left_are_read_back_from_its_failure_text():
    problem = leaks.left_running_problem(
        ["pid 12 (sleep 1000)", "pid 13 (sleep 5), in its own session"]
    )
    text = f"some output\n{problem}\nreproduce: pytest x"
    assert (
        leaks.left_running_in(text) == "pid 12 (sleep 1000); pid 13 (sleep 5), in its own session"
    )
    assert leaks.left_running_in("AssertionError: boom") == ""


def test_a_child_started_from_another_thread_is_found_among_many_threads():
    # The kernel lists a child under the thread that forked it; a rank on NCCL has
    # about 40 threads, every one of them read.
    import threading

    started, stop = [], threading.Event()
    idle = [threading.Thread(target=stop.wait) for _ in range(40)]
    for thread in idle:
        thread.start()
    forker = threading.Thread(target=lambda: started.append(subprocess.Popen(["sleep", "30"])))
    forker.start()
    forker.join()
    try:
        assert started[0].pid in leaks.children()
    finally:
        stop.set()
        started[0].kill()
        started[0].wait()
        for thread in idle:
            thread.join()


def _childless_as_a_child_sees_it() -> None:
    """In a fresh child (no children of its own): childless() at each step, as exit bits."""
    import os
    import threading

    bits = 0
    if leaks.childless():
        bits |= 1
    sleeper = subprocess.Popen(["sleep", "30"])  # a running child
    if not leaks.childless():
        bits |= 2
    sleeper.kill()
    while leaks.running(sleeper.pid):
        time.sleep(0.01)
    if not leaks.childless():  # exited, not reaped: still a child, and not reaped by asking
        bits |= 4
    if leaks.childless():
        bits |= 64  # never: asking reaped it
    sleeper.wait()
    if leaks.childless():
        bits |= 8
    started = []
    forker = threading.Thread(target=lambda: started.append(subprocess.Popen(["sleep", "30"])))
    forker.start()
    forker.join()
    if not leaks.childless():  # a child of another thread counts too
        bits |= 16
    started[0].kill()
    started[0].wait()
    if leaks.end_leftovers(set()) == []:
        bits |= 32
    os._exit(bits)


def test_childless_sees_running_exited_and_other_threads_children_and_reaps_none():
    import multiprocessing

    process = multiprocessing.get_context("fork").Process(target=_childless_as_a_child_sees_it)
    process.start()
    process.join(30)
    assert process.exitcode == 1 | 2 | 4 | 8 | 16 | 32
