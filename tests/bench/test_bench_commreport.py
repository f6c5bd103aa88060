"""Crossovers, the table and reference loading of ``rankgate bench comm``."""

from __future__ import annotations

import pytest

from rankgate.bench.commreport import crossovers, load_references, table

pytestmark = pytest.mark.unit


def row(backend, nbytes, eager, graph=None, collective="all_reduce", wrong=0):
    return {
        "collective": collective, "backend": backend, "bytes": nbytes, "count": nbytes // 4,
        "dtype": "fp32", "path": "", "wrong": wrong,
        "eager_us": eager, "eager_algbw": nbytes / eager / 1e3, "eager_busbw": nbytes / eager / 1e3,
        "graph_us": graph, "graph_algbw": None if graph is None else 1.0,
        "graph_busbw": None if graph is None else 1.0,
    }  # fmt: skip


RESULTS = [
    row("nccl", 1024, 20.0, 11.0),
    row("p2p-oneshot", 1024, 9.0, 6.0),
    row("p2p-twoshot", 1024, 10.0, 7.0),
    row("auto", 1024, 9.3, 6.1),
    row("nccl", 4 << 20, 32.0, 36.0),
    row("p2p-oneshot", 4 << 20, 31.0, 30.0),
    row("p2p-twoshot", 4 << 20, 21.0, 20.0),
    row("auto", 4 << 20, 21.5, 20.5),
    row("nccl", 1 << 30, 3000.0),
    row("auto", 1 << 30, 3030.0),
    row("nccl", 1024, 15.0, collective="broadcast"),
]


def test_crossovers_name_the_fastest_and_autos_gap():
    cross = crossovers(RESULTS)
    eager = cross["eager"]
    assert eager["fastest"] == {
        "1024": "p2p-oneshot",
        "4194304": "p2p-twoshot",
        "1073741824": "nccl",
    }
    assert [r["backend"] for r in eager["ranges"]] == ["p2p-oneshot", "p2p-twoshot", "nccl"]
    assert eager["auto_ratio"]["1024"] == pytest.approx(9.3 / 9.0, abs=1e-3)
    assert eager["auto_worst_1K_1G"] == pytest.approx(1.033, abs=1e-3)
    assert "1073741824" not in cross["graph"]["fastest"]  # no graph figure at 1 GiB


def test_table_has_nccl_tests_columns_and_reference(tmp_path):
    (tmp_path / "nccl_all_reduce.txt").write_text(
        "# Collective test starting: all_reduce_perf\n"
        "        1024           256     float     sum      -1    16.00    0.06    0.06       0"
        "    16.00    0.06    0.06       0\n"
    )
    refs = load_references([str(tmp_path)])
    assert set(refs) == {"all_reduce"} and refs["all_reduce"][1024]["time_us"] == 16.0
    meta = {"world": 2, "gpu": "GPU", "torch": "2.x", "nccl": "2.28.9",
            "options": {"iters": 20, "warmup": 5, "reps": 5}}  # fmt: skip
    text = table({"meta": meta, "results": RESULTS, "crossovers": crossovers(RESULTS)}, refs)
    assert "# all_reduce  backend p2p-oneshot" in text
    assert "#wrong" in text and "busbw" in text and "ref time" in text
    assert "# all_reduce fastest single backend (eager): p2p-oneshot 1024..1024 B" in text
    nccl_1k = next(
        line for line in text.splitlines() if line.strip().startswith("1024") and "20.00" in line
    )
    assert nccl_1k.rstrip().endswith("1.25")  # 20 us against the reference's 16 us
