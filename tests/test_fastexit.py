"""A pytest process that loaded rankgate skips the interpreter's last collection at exit."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

# A handler registered before the plugin's runs after it (atexit runs the last registered
# first): it sees whether the heap was frozen by then, and that it was not before.
PROBE = """
import atexit, gc
atexit.register(lambda: print("at exit, frozen:", gc.get_freeze_count() > 0))
import rankgate.pytest_plugin
print("before exit, frozen:", gc.get_freeze_count() > 0)
"""


def test_the_heap_is_frozen_at_exit_and_not_before():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.splitlines() == ["before exit, frozen: False", "at exit, frozen: True"]

