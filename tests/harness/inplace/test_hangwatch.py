"""The in-place hang watch: labelled, untorn stacks at the timeout, and a fallback without the GIL."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from rankgate.harness.inplace.hangwatch import without_pytest_frames

pytestmark = pytest.mark.unit

SCRIPT = """
import ctypes, sys, time
from rankgate.harness.inplace.hangwatch import HangWatch

def record(stacks, why):
    print("on_timeout got the stacks:", "in hang_in_python" in stacks)

watch = HangWatch(3, sys.stderr)
watch.arm(0.5, fallback_s=1.0, on_timeout=record)
time.sleep(0.1)
watch.disarm()          # a test that ends in time leaves the process alone
watch.arm(1.0, fallback_s=1.0, on_timeout=record)

def hang_in_python():
    time.sleep(100)

def hang_holding_the_gil():
    ctypes.PyDLL(None).sleep(100)  # a C call that never releases the GIL

{hang}()
"""


def run(hang: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT.format(hang=hang))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, time.monotonic() - start


def test_a_hang_prints_labelled_stacks_and_exits():
    proc, seconds = run("hang_in_python")
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1
    assert lines[0] == "[rank 3] Timeout (0:00:01)! Python stacks of every thread:"
    assert all(line.startswith("[rank 3] ") for line in lines), proc.stderr
    assert any(line.endswith("in hang_in_python") for line in lines), proc.stderr
    assert not any("hangwatch.py" in line for line in lines), "the watcher's own stack is left out"
    assert proc.stdout == "on_timeout got the stacks: True\n"
    assert seconds < 10  # the labels show the watcher fired, not the fallback at 2 s


def test_a_hang_holding_the_gil_ends_through_faulthandler():
    proc, seconds = run("hang_holding_the_gil")
    assert proc.returncode == 1
    assert proc.stderr.startswith("Timeout (0:00:02)!\n"), proc.stderr
    assert "in hang_holding_the_gil" in proc.stderr
    assert "[rank 3]" not in proc.stderr
    assert "on_timeout" not in proc.stdout  # the watcher never ran
    assert 2.0 <= seconds < 30


def test_an_in_place_hang_stack_stops_at_pytests_frames():
    # faulthandler's dump of the test's thread, most recent call first, as a hung rank has it
    block = [
        "Thread 0x00007f69ca87bb80 (most recent call first):",
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce',
        '  File "/proj/raise/test_raise.py", line 21 in test_raise_after_collective',
        '  File "/venv/lib/python3.11/site-packages/_pytest/python.py", line 187 in pytest_pyfunc_call',
        '  File "/venv/lib/python3.11/site-packages/pluggy/_execution.py", line 147 in _multicall',
        '  File "/src/rankgate/harness/inplace.py", line 390 in pytest_runtest_call',
        '  File "/venv/lib/python3.11/site-packages/_pytest/runner.py", line 139 in runtestprotocol',
        '  File "<frozen runpy>", line 88 in _run_code',
    ]
    assert without_pytest_frames(block) == [*block[:3], "  (pytest frames omitted)"]
    other_thread = block[:2]
    assert without_pytest_frames(other_thread) == other_thread


def test_an_in_place_hang_stack_leaves_out_the_ledgers_wrapper():
    block = [
        "Thread 0x00007f69ca87bb80 (most recent call first):",
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4800 in barrier',
        '  File "/venv/lib/python3.11/site-packages/rankgate/harness/ledger.py", line 196 in collective',
        '  File "/proj/test_hang.py", line 16 in test_hang',
        '  File "/venv/lib/python3.11/site-packages/_pytest/python.py", line 187 in pytest_pyfunc_call',
    ]
    assert without_pytest_frames(block) == [
        *block[:2], block[3], "  (pytest frames omitted)"
    ]  # fmt: skip
