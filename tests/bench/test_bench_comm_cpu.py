"""``rankgate bench comm`` at its CPU defaults (gloo, all_reduce, 8 B..1 MiB): the bench stage's numbers."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.warmstart import WARM_PYTHON

pytestmark = pytest.mark.perf


def test_bench_comm_cpu_defaults(tmp_path):
    cmd = [WARM_PYTHON.executable(), "-m", "rankgate.cli", "bench", "comm", "--cpu",
           "--out", str(tmp_path), "--json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])["results"]
    # nccl-tests' sweep: 8 B by 4 up to 1 MiB
    assert [(r["backend"], r["bytes"]) for r in rows] == [("gloo", 8 * 4**i) for i in range(9)]
    assert all(r["wrong"] == 0 for r in rows), rows
    print(done.stdout.split("\n{")[0])  # the table, for the stage's log


def test_backends_take_turns_at_each_size_the_order_reversed_every_size(tmp_path):
    """Drift over a sweep falls on every backend alike: at each size they run in turn."""
    cmd = [WARM_PYTHON.executable(), "-m", "rankgate.cli", "bench", "comm", "--cpu",
           "--backends", "gloo,auto",
           "-b", "1K", "-e", "4K", "-f", "2", "--iters", "2", "--reps", "2", "--rounds", "2", "--json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])["results"]
    assert [(r["backend"], r["bytes"]) for r in rows] == [
        ("gloo", 1024), ("auto", 1024), ("auto", 2048), ("gloo", 2048), ("gloo", 4096),
        ("auto", 4096),
    ]  # fmt: skip
    assert all(len(r["eager_rounds_us"]) == 2 and r["wrong"] == 0 for r in rows), rows
