"""``rankgate bench harness`` and ``rankgate bench comm`` end to end on the CPU (gloo, 2 ranks).

Small runs, so the dist stage keeps them: each starts real ranks, writes its JSON and
is checked for shape and for what a working benchmark must show; neither asserts a
wall time (``perf`` benchmarks never do).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.warmstart import WARM_PYTHON

# launches: each test starts rankgate's own ranks (a pool, or bench comm's gloo ranks),
# which in place would rendezvous on the launcher's variables of every rank
pytestmark = [pytest.mark.dist, pytest.mark.slow, pytest.mark.launches]


def rankgate(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    cmd = [WARM_PYTHON.executable(), "-m", "rankgate.cli", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_bench_harness_json_with_small_k():
    done = rankgate("bench", "harness", "--json", "--k", "3", "--spawn-k", "1", "--worlds", "2")
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert [(r["world"], r["backend"], r["k_pool"], r["k_spawn"]) for r in rows] == [
        (2, "gloo", 3, 1)
    ]
    row = rows[0]
    assert row["pool_start_s"] > 0 and row["pool_median_ms"] > 0
    # a pool that reuses its ranks is far cheaper per test than starting two new ones
    assert 0 < row["pool_ms_per_test"] < row["spawn_ms_per_test"]
    header = done.stdout.splitlines()[0].split()
    assert header[:3] == ["world", "backend", "pool"], done.stdout


def test_bench_harness_refuses_bad_counts():
    cmd = [WARM_PYTHON.executable(), "-m", "rankgate.cli", "bench", "harness", "--k", "0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "rankgate bench harness: error: argument --k: must be an integer >= 1, got 0\n"
    )


def test_bench_comm_on_gloo_small_sizes(tmp_path):
    done = rankgate(
        "bench", "comm", "--cpu", "--backends", "gloo,auto",
        "--collectives", "all_reduce,broadcast,all_gather,reduce_scatter,send_recv",
        "-b", "8", "-e", "512", "-f", "8", "--iters", "3", "--reps", "3", "--warmup", "1",
        "--rounds", "2", "--out", str(tmp_path), "--json",
    )  # fmt: skip
    result = json.loads(done.stdout.strip().splitlines()[-1])
    rows = result["results"]
    assert {r["collective"] for r in rows} == {
        "all_reduce", "broadcast", "all_gather", "reduce_scatter", "send_recv"
    }  # fmt: skip
    for backend in ("gloo", "auto"):  # auto on the CPU is gloo, after a calibrating sweep
        sizes = [
            r["bytes"] for r in rows if r["collective"] == "all_reduce" and r["backend"] == backend
        ]
        assert sizes == [8, 64, 512]
    assert result["meta"]["auto_config"] is None  # no nccl or p2p kernel to choose between
    assert all(r["wrong"] == 0 for r in rows), rows  # every result checked on the host
    assert all(r["eager_us"] > 0 and r["graph_us"] is None for r in rows)
    for r in rows:  # two rounds: the figure is their median, i.e. their mean
        assert len(r["eager_rounds_us"]) == 2
        assert r["eager_us"] == pytest.approx(sum(r["eager_rounds_us"]) / 2)
    assert result["meta"]["world"] == 2 and result["meta"]["device"] == "cpu"
    assert json.loads((tmp_path / "comm.json").read_text())["results"] == rows
    text = (tmp_path / "comm.txt").read_text()
    assert "# all_reduce  backend gloo" in text and "# all_reduce  backend auto" in text
    assert "median over 2 rounds" in text
    assert (tmp_path / "comm_all_reduce.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
