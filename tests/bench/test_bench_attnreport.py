"""Combining per-rank attention-benchmark rows: slowest rank, median, speedup, fits."""

from __future__ import annotations

import pytest

from rankgate.bench.attnreport import combine, linear_fit, table

pytestmark = pytest.mark.unit

OPTS = {"batch": 2}


def _row(method, world, seq, rank, reps, **extra):
    return {"method": method, "world": world, "seq": seq, "rank": rank, "rep_s": reps,
            "iters": 1, "peak_bytes": None} | extra  # fmt: skip


def test_time_is_median_over_reps_of_the_slowest_rank_and_speedup_uses_single():
    rows = [
        _row("single", 1, 8, 0, [4.0, 5.0, 6.0]),
        _row("ring", 2, 8, 0, [1.0, 3.0, 2.0], exposed_comm_s=0.1),
        _row("ring", 2, 8, 1, [2.5, 1.0, 2.0], exposed_comm_s=0.2),
    ]
    out = {(r["method"], r["world"]): r for r in combine(rows, OPTS)["results"]}
    ring = out[("ring", 2)]
    assert ring["rep_ms"] == [2500.0, 3000.0, 2000.0]  # max over ranks, per repetition
    assert ring["time_ms"] == 2500.0
    assert ring["tokens_per_s"] == pytest.approx(2 * 8 / 2.5)
    assert ring["speedup"] == pytest.approx(5.0 / 2.5) and ring["efficiency"] == pytest.approx(1.0)
    assert ring["exposed_comm_ms_per_rank"] == pytest.approx([100.0, 200.0])
    assert ring["comm_kernel_ms_per_rank"] is None  # not measured: no figure, never a guess


def test_an_error_on_any_rank_is_the_row_and_skips_are_kept():
    rows = [
        _row("ring", 2, 8, 0, [1.0]),
        {"method": "ring", "world": 2, "seq": 8, "rank": 1, "error": "OutOfMemoryError: x"},
        {"method": "torch-cp", "world": 2, "seq": None, "rank": 0, "skipped": "why"},
    ]
    results = combine(rows, OPTS)["results"]
    assert {"method": "ring", "world": 2, "seq": 8, "error": "OutOfMemoryError: x"} in results
    assert {"method": "torch-cp", "world": 2, "seq": None, "skipped": "why"} in results


def test_linear_fit_recovers_a_line():
    intercept, slope = linear_fit([1, 2, 4], [3 + 2 * x for x in (1, 2, 4)])
    assert (intercept, slope) == pytest.approx((3.0, 2.0))


def test_fit_checks_need_every_rank_and_show_in_the_table():
    fit = {"method": "ring", "world": 2, "fit": True, "cap_bytes": 2**33, "device_bytes": 2**37,
           "intercept_bytes": 2**29, "bytes_per_token": 40 * 1024, "projected_seq_cap": 196608,
           "projected_seq_device": 3 * 2**20}  # fmt: skip
    rows = [
        fit | {"rank": 0, "checks": [{"probe": "fits", "seq": 190464, "ran": True, "peak_bytes": 2**32, "error": ""}]},
        fit | {"rank": 1, "checks": [{"probe": "fits", "seq": 190464, "ran": False, "peak_bytes": None, "error": "OOM"}]},
    ]
    (got,) = combine(rows, OPTS)["fit"]
    assert got["checks"] == [{"probe": "fits", "seq": 190464, "ran": False, "peak_gib": 4.0, "error": "OOM"}]
    meta = {"device": "cuda:0", "torch": "t", "time": "now", "gpu": "G",
            "options": {"causal": True, "dtype": "bf16", "batch": 1, "heads": 32, "kv_heads": 8,
                        "head_dim": 128, "head_chunks": None}}  # fmt: skip
    text = table({"meta": meta, "results": [], "fit": [got]})
    assert "ring     2  40.0 KiB/token/GPU + 0.50 GiB; fits 196608 tokens in 8 GiB" in text
    assert "fits 190464: did not fit (peak 4.00 GiB)" in text
