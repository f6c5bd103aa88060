"""pool: a rank's stack keeps the test's frames and drops the worker's under them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankgate.harness.pool import hungstacks, pool

pytestmark = pytest.mark.unit


def test_the_worker_frames_under_the_test_are_dropped():
    worker = Path(pool.__file__).with_name("worker.py")
    assert worker.is_file()
    stack = "\n".join(
        [
            "Current thread 0x00007f (most recent call first):",
            '  File "/proj/test_hang.py", line 9 in test_hang',
            f'  File "{worker}", line 170 in _run_test',
            f'  File "{worker}", line 120 in worker_main',
            '  File "/usr/lib/python3.11/multiprocessing/process.py", line 108 in run',
            "",
            "Thread 0x00007e (most recent call first):",
            '  File "/usr/lib/python3.11/threading.py", line 320 in wait',
        ]
    )
    assert hungstacks.trim_harness_frames(stack).splitlines() == [
        "Current thread 0x00007f (most recent call first):",
        '  File "/proj/test_hang.py", line 9 in test_hang',
        "  (rankgate worker frames omitted)",
        "",
        "Thread 0x00007e (most recent call first):",
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait',
    ]


def test_the_ledgers_wrapper_between_torch_and_the_test_is_dropped():
    from rankgate.harness import ledger

    wrapper = Path(ledger.__file__)
    assert wrapper.is_file()
    stack = "\n".join(
        [
            "Current thread 0x00007f (most recent call first):",
            '  File "/venv/torch/distributed/distributed_c10d.py", line 4800 in barrier',
            f'  File "{wrapper}", line 196 in collective',
            '  File "/proj/test_hang.py", line 16 in test_hang',
        ]
    )
    assert hungstacks.trim_harness_frames(stack).splitlines() == [
        "Current thread 0x00007f (most recent call first):",
        '  File "/venv/torch/distributed/distributed_c10d.py", line 4800 in barrier',
        '  File "/proj/test_hang.py", line 16 in test_hang',
    ]
