"""``rankgate bench packing``: the table and the JSON line, through the real command."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.warmstart import WARM_PYTHON

pytestmark = pytest.mark.unit


def _bench(*args: str) -> subprocess.CompletedProcess:
    cmd = [WARM_PYTHON.executable(), "-m", "rankgate.cli", "bench", "packing", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_bench_packing_prints_the_table_and_json():
    done = _bench("--json", "--samples", "256", "--ranks", "4", "--cap", "4096", "--repeats", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].split() == ["distribution", "algorithm", "minibatches", "balance", "efficiency", "ms"]
    rows = json.loads(lines[-1])
    assert [(r["distribution"], r["algorithm"]) for r in rows] == [
        (d, a)
        for d in ("uniform", "bimodal", "power_law", "outlier_heavy")
        for a in ("greedy", "lpt")
    ]
    for row, line in zip(rows, lines[1:-1]):
        assert line.split()[:3] == [row["distribution"], row["algorithm"], str(row["minibatches"])]
        assert row["samples"] == 256 and row["ranks"] == 4 and row["cap"] == 4096
        # Efficiency is tokens over the budget of the minibatches used.
        assert row["efficiency"] == pytest.approx(row["tokens"] / (row["minibatches"] * 4 * 4096))
        assert row["seconds"] > 0
    by = {(r["distribution"], r["algorithm"]): r for r in rows}
    for d in ("bimodal", "power_law", "outlier_heavy"):
        assert by[d, "lpt"]["balance"] > by[d, "greedy"]["balance"]


def test_bench_packing_refuses_a_bad_count():
    done = _bench("--ranks", "0")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "rankgate bench packing: error: argument --ranks: must be an integer >= 1, got 0\n"
