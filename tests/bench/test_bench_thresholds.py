"""auto's sizes from measured crossovers (rankgate.bench.comm.thresholds_from_crossovers)."""

from __future__ import annotations

import pytest

from rankgate.bench.comm import thresholds_from_crossovers
from rankgate.workloads.comm import P2PConfig
from rankgate.workloads.comm.push_kernel import MAX_SLOT_BYTES

pytestmark = pytest.mark.unit
KiB, MiB = 1 << 10, 1 << 20


def fastest(*ranges: tuple[str, list[int]]) -> dict:
    return {str(size): backend for backend, sizes in ranges for size in sizes}


def test_each_kernel_gets_up_to_its_largest_win_in_each_mode():
    cross = {
        "eager": {"fastest": fastest(("p2p-push", [8, 512]), ("p2p-oneshot", [2 * KiB, 512 * KiB]),
                                     ("p2p-twoshot", [2 * MiB, 8 * MiB]), ("nccl", [32 * MiB]))},
        "graph": {"fastest": fastest(("p2p-push", [8, 128 * KiB]), ("p2p-oneshot", [512 * KiB]),
                                     ("p2p-twoshot", [2 * MiB, 32 * MiB]))},
    }
    config = thresholds_from_crossovers(cross, limit=32 * MiB)
    assert config == {
        "push_max_bytes": 512, "oneshot_max_bytes": 512 * KiB, "twoshot_max_bytes": 8 * MiB,
        # NCCL won no graph size (graphs stop at 64 MiB): the p2p wins still set the sizes
        "graph_push_max_bytes": 128 * KiB, "graph_oneshot_max_bytes": 512 * KiB,
        "graph_twoshot_max_bytes": 32 * MiB,
    }
    P2PConfig(buffer_bytes=64 * MiB, **config)  # a valid configuration


def test_limits_cap_the_sizes_and_push_rounds_to_16_bytes():
    cross = {"eager": {"fastest": fastest(("p2p-push", [40, 1 << 30]), ("p2p-twoshot", [64 * MiB]),
                                          ("nccl", [128 * MiB]))}}
    config = thresholds_from_crossovers(cross, limit=8 * MiB)
    assert config == {"push_max_bytes": MAX_SLOT_BYTES, "oneshot_max_bytes": 8 * MiB,
                      "twoshot_max_bytes": 8 * MiB}
    cross = {"eager": {"fastest": fastest(("p2p-push", [40]), ("nccl", [1 * KiB]))}}
    assert thresholds_from_crossovers(cross, limit=8 * MiB)["push_max_bytes"] == 48


def test_a_mode_where_no_p2p_kernel_won_keeps_the_defaults():
    cross = {"eager": {"fastest": fastest(("nccl", [8, 1 * MiB]))}, "graph": {"fastest": {}}}
    assert thresholds_from_crossovers(cross, limit=32 * MiB) is None


def test_median_over_rounds_keeps_the_first_rounds_order_and_the_worst_checked_wrong():
    from rankgate.bench.comm import median_over_rounds

    def row(backend, nbytes, eager, graph=None, wrong=0):
        return {"collective": "all_reduce", "backend": backend, "bytes": nbytes,
                "eager_s": eager, "graph_s": graph, "wrong": wrong}

    first = [row("nccl", 8, 3.0, 1.0), row("auto", 8, 9.0, 2.0)]
    second = [row("auto", 8, 1.0, 4.0, wrong=2), row("nccl", 8, 2.0, 5.0)]
    third = [row("nccl", 8, 4.0, 3.0, wrong=None), row("auto", 8, 2.0, 6.0, wrong=None)]
    merged = median_over_rounds([first, second, third])
    assert [(r["backend"], r["eager_s"], r["graph_s"], r["wrong"]) for r in merged] == [
        ("nccl", 3.0, 3.0, 0), ("auto", 2.0, 4.0, 2)]
    assert merged[1]["eager_rounds_s"] == [9.0, 1.0, 2.0]
    cpu = median_over_rounds([[row("gloo", 8, 5.0)]])
    assert cpu[0]["graph_s"] is None and cpu[0]["eager_s"] == 5.0
    unchecked = median_over_rounds([[row("gloo", 1 << 30, 5.0, wrong=None)]] * 2)
    assert unchecked[0]["wrong"] is None  # past --check-max-bytes: no round checked it
