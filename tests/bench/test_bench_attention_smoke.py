"""``rankgate bench attention`` end to end on the CPU (gloo, worlds 1 and 2): the smoke run."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.warmstart import WARM_PYTHON

pytestmark = pytest.mark.perf


def test_bench_attention_smoke_on_gloo(tmp_path):
    cmd = [
        WARM_PYTHON.executable(), "-m", "rankgate.cli", "bench", "attention", "--cpu",
        "--worlds", "1,2",
        "--seq-lens", "64,128", "--heads", "4", "--kv-heads", "2", "--head-dim", "8",
        "--reps", "2", "--min-rep-seconds", "0.01", "--out", str(tmp_path), "--json",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    rows = {(r["method"], r["world"], r["seq"]): r for r in result["results"]}
    assert set(rows) == {
        ("single", 1, 64), ("single", 1, 128), ("ring", 1, 64), ("ring", 1, 128),
        ("ring", 2, 64), ("ring", 2, 128), ("torch-cp", 2, None),
    }  # fmt: skip
    assert "no sharding rule for the CPU" in rows[("torch-cp", 2, None)]["skipped"]
    for key in [k for k in rows if k[0] != "torch-cp"]:
        r = rows[key]
        assert r["time_ms"] > 0 and len(r["rep_ms"]) == 2
        assert r["time_ms"] == pytest.approx(sum(r["rep_ms"]) / 2)  # median of two
        assert r["tokens_per_s"] == pytest.approx(key[2] / (r["time_ms"] / 1e3))
        assert r["speedup"] == pytest.approx(rows[("single", 1, key[2])]["time_ms"] / r["time_ms"])
        assert r["efficiency"] == pytest.approx(r["speedup"] / key[1])
    ring2 = rows[("ring", 2, 128)]
    assert len(ring2["exposed_comm_ms_per_rank"]) == 2 and len(ring2["time_ms_per_rank"]) == 2
    # per iteration each rank sends k and v (64 tokens x 2 heads x 8 dims, fp32) 4 times
    assert ring2["sent_mib_per_rank"] == [4 * 2 * 64 * 2 * 8 * 4 / 2**20] * 2
    assert result["meta"]["options"]["worlds"] == [1, 2] and result["meta"]["device"] == "cpu"
    text = (tmp_path / "attention.txt").read_text()
    assert "skipped: PyTorch's context_parallel" in text and "     ring     2      128" in text
    assert (tmp_path / "attention_throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "attention_speedup.png").is_file()
