"""A stopping rank ends the processes it started, and no other: between its SIGTERM and
its SIGKILL a descendant can end and be reaped, and its pid then name another process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit  # one short Python process and its two children

SCRIPT = """
import subprocess, sys, time
from pathlib import Path
from rankgate.harness import leaks
from rankgate.harness.inplace import lastrecord

marker = Path(sys.argv[1])
# Ends at SIGTERM, as most do.
plain = subprocess.Popen(["sleep", "60"])
# Stays through SIGTERM and says it got it; from then on its start time reads as another
# process's would, were its pid reused by the SIGKILL round.
stays = subprocess.Popen([sys.executable, "-c",
    "import pathlib, signal, sys, time\\n"
    "signal.signal(signal.SIGTERM, lambda *_: pathlib.Path(sys.argv[1]).touch())\\n"
    "print('ready', flush=True)\\n"
    "time.sleep(60)\\n", str(marker)], stdout=subprocess.PIPE, text=True)
assert stays.stdout.readline() == "ready\\n"
real = leaks.started

def started(pid):
    found = real(pid)
    if pid == stays.pid and marker.exists() and found is not None:
        return found + 1
    return found

leaks.started = started
lastrecord.end_children()
time.sleep(0.5)  # a SIGKILL sent at the end lands well within
print("plain", leaks.running(plain.pid), "stays", leaks.running(stays.pid))
stays.kill()
stays.wait()
"""


def test_the_sigkill_round_skips_a_pid_that_names_another_process_by_then(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path / "got-sigterm")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "got-sigterm").exists()
    # sleep ended at SIGTERM; the other was spared the SIGKILL.
    assert done.stdout.splitlines()[-1] == "plain False stays True"
