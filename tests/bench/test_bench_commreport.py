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


def test_choice_ratio_judges_the_kernel_auto_took_by_the_singles_own_times():
    auto_small = dict(row("auto", 1024, 9.9, 6.6), path="oneshot", graph_path="push")
    auto_large = dict(row("auto", 4 << 20, 33.0, 21.0), path="nccl", graph_path="twoshot")
    results = [
        row("nccl", 1024, 20.0, 11.0), row("p2p-push", 1024, 12.0, 5.0),
        row("p2p-oneshot", 1024, 9.0, 6.0), auto_small,
        row("nccl", 4 << 20, 32.0, 36.0), row("p2p-twoshot", 4 << 20, 21.0, 20.0), auto_large,
    ]  # fmt: skip
    cross = crossovers(results)
    # eager: one-shot at 1 KiB (the fastest), NCCL at 4 MiB where two-shot was faster
    assert cross["eager"]["choice_ratio"] == {"1024": 1.0, "4194304": pytest.approx(32 / 21, abs=1e-3)}
    assert cross["eager"]["choice_worst_1K_1G"] == pytest.approx(32 / 21)
    # graph: push and two-shot, the fastest at both sizes, whatever auto's own noise
    assert cross["graph"]["choice_ratio"] == {"1024": 1.0, "4194304": 1.0}
    assert cross["graph"]["auto_ratio"]["1024"] == pytest.approx(6.6 / 5.0)


def test_the_paired_ratio_is_the_median_of_autos_ratio_within_each_round():
    # 64 KiB eagerly on 2 x H100 (pool-selection-2026-11-27, 7 rounds, rounded): the
    # host's drift moved both times round to round; the medians of the times compare
    # auto's fast rounds with push's slow ones and the other way round
    auto_us = [10.9, 10.2, 10.4, 11.6, 8.8, 9.4, 8.6]
    push_us = [10.7, 10.7, 11.0, 8.9, 8.9, 8.8, 8.5]
    results = [
        dict(row("p2p-push", 64 << 10, 8.9), eager_rounds_us=push_us),
        dict(row("auto", 64 << 10, 10.2), eager_rounds_us=auto_us, path="push"),
        dict(row("nccl", 64 << 10, 25.0), eager_rounds_us=[25.0] * 7),
    ]
    eager = crossovers(results)["eager"]
    assert eager["auto_ratio"]["65536"] == pytest.approx(10.2 / 8.9, abs=1e-3)  # 1.146
    assert eager["auto_paired_ratio"] == {"65536": pytest.approx(8.6 / 8.5, abs=1e-3)}
    assert eager["auto_paired_worst_1K_1G"] == pytest.approx(8.6 / 8.5)
    meta = {"world": 2, "gpu": "GPU", "torch": "2.x", "nccl": "2.28.9",
            "options": {"iters": 20, "warmup": 5, "reps": 5, "rounds": 7}}  # fmt: skip
    text = table({"meta": meta, "results": results, "crossovers": crossovers(results)}, {})
    assert ("# auto / fastest (eager), median over rounds of the ratio within a round, "
            "worst over 1 KiB..1 GiB: 1.012") in text  # fmt: skip
    # one round: no paired figure, and no line for it
    assert crossovers(RESULTS)["eager"]["auto_paired_worst_1K_1G"] is None
    assert crossovers(RESULTS)["eager"]["auto_paired_ratio"] == {}


def test_a_forced_kernel_that_fell_back_to_nccl_is_no_single_backend():
    # bf16 on 2 x H200 (run 6): at 64 MiB the forced one-shot went to NCCL and "won",
    # which made auto use one-shot up to 32 MiB in a graph (1.6x slower at 16 MiB).
    fell_back = dict(row("p2p-oneshot", 64 << 20, 250.0, 255.0), path="nccl")
    cross = crossovers([row("nccl", 64 << 20, 251.0, 256.0), fell_back,
                        row("auto", 64 << 20, 251.0, 256.0)])
    assert cross["eager"]["fastest"] == {str(64 << 20): "nccl"}
    assert cross["graph"]["auto_ratio"] == {str(64 << 20): 1.0}


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


def test_a_table_read_back_gives_the_crossovers_it_printed():
    """The committed 2 x H200 rerun's comm.txt: its summary lines and its rows agree."""
    from pathlib import Path

    from rankgate.bench.commreport import parse_table

    text = (Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "nvidia-h200-x2"
            / "rerun-graph-fp32" / "comm.txt").read_text()  # fmt: skip
    result = parse_table(text)
    assert result["meta"]["world"] == 2 and result["meta"]["options"]["rounds"] == 3
    assert len(result["results"]) == 75
    cross = crossovers(result["results"])
    assert round(cross["graph"]["auto_worst_1K_1G"], 3) == 1.212  # printed: 1.212
    assert round(cross["eager"]["auto_worst_1K_1G"], 3) == 1.417  # printed: 1.417
    assert cross["eager"]["choice_worst_1K_1G"] == 1.0
    assert cross["graph"]["choice_worst_1K_1G"] is None  # the table has no graph paths
    assert result["meta"]["printed_choice_worst_1K_1G"] == {"eager": 1.0, "graph": 1.0}
