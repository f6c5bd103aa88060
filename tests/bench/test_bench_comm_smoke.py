"""``rankgate bench comm`` end to end on the CPU (gloo, 2 ranks, small sizes): the smoke run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.perf


def test_bench_comm_smoke_on_gloo(tmp_path):
    cmd = [
        sys.executable, "-m", "rankgate.cli", "bench", "comm", "--cpu", "--backends", "gloo,auto",
        "--collectives", "all_reduce,broadcast,all_gather,reduce_scatter,send_recv",
        "-b", "8", "-e", "4K", "-f", "8", "--iters", "5", "--reps", "3", "--warmup", "2", "--rounds", "2",
        "--out", str(tmp_path), "--json",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    rows = result["results"]
    assert {r["collective"] for r in rows} == {
        "all_reduce", "broadcast", "all_gather", "reduce_scatter", "send_recv"
    }  # fmt: skip
    for backend in ("gloo", "auto"):  # auto on the CPU is gloo, after a calibrating sweep
        sizes = [r["bytes"] for r in rows if r["collective"] == "all_reduce" and r["backend"] == backend]
        assert sizes == [8, 64, 512, 4096]
    assert result["meta"]["auto_config"] is None  # no nccl or p2p kernel to choose between
    assert all(r["wrong"] == 0 for r in rows), rows
    assert all(r["eager_us"] > 0 and r["graph_us"] is None for r in rows)
    for r in rows:  # two rounds: the figure is their median, i.e. their mean
        assert len(r["eager_rounds_us"]) == 2
        assert r["eager_us"] == pytest.approx(sum(r["eager_rounds_us"]) / 2)
    assert result["meta"]["world"] == 2 and result["meta"]["device"] == "cpu"
    assert (tmp_path / "comm.json").is_file() and (tmp_path / "comm.txt").is_file()
    text = (tmp_path / "comm.txt").read_text()
    assert "# all_reduce  backend gloo" in text and "# all_reduce  backend auto" in text
    assert "median over 2 rounds" in text
    assert (tmp_path / "comm_all_reduce.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
