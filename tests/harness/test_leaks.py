"""What counts as a process a test left running."""

from __future__ import annotations

import subprocess

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
