"""nccl-tests arithmetic: bus factors, sizes, size parsing, and reading nccl-tests output."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankgate.bench.busbw import (
    algbw,
    bus_factor,
    busbw,
    fit_size,
    message_sizes,
    parse_nccl_tests,
    parse_size,
)

pytestmark = pytest.mark.unit

# The repository's copies of the 2xH200 nccl-tests outputs.
REFERENCE = Path(__file__).resolve().parents[2] / "benchmarks" / "reference" / "nvidia-h200-x2"


@pytest.mark.parametrize(
    ("collective", "world", "factor"),
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 4, 1.5),
        ("all_reduce", 8, 1.75),
        ("all_gather", 2, 0.5),
        ("reduce_scatter", 4, 0.75),
        ("broadcast", 8, 1.0),
        ("send_recv", 2, 1.0),
    ],
)
def test_bus_factors_are_nccl_tests(collective, world, factor):
    assert bus_factor(collective, world) == pytest.approx(factor)


def test_bandwidths():
    assert algbw(2 << 30, 6303.83e-6) == pytest.approx(340.66, abs=0.01)  # nccl-tests' row
    assert busbw("all_reduce", 2 << 30, 6303.83e-6, 2) == pytest.approx(340.66, abs=0.01)
    assert busbw("all_reduce", 1 << 30, 1.0, 4) == pytest.approx(1.5 * (1 << 30) / 1e9)
    assert algbw(8, 0.0) == 0.0
    with pytest.raises(ValueError, match="unknown collective 'alltoall'"):
        bus_factor("alltoall", 2)


def test_sizes_match_nccl_tests_default_sweep():
    sizes = message_sizes(8, 2 << 30, 4)
    assert sizes[0] == 8 and sizes[-1] == 2 << 30 and len(sizes) == 15
    assert message_sizes(1, 1, 2) == [1]
    with pytest.raises(ValueError, match="factor must be >= 2"):
        message_sizes(8, 64, 1)
    with pytest.raises(ValueError, match=r"need 1 <= min \(64\) <= max \(8\)"):
        message_sizes(64, 8, 2)


@pytest.mark.parametrize(
    ("text", "value"),
    [("8", 8), ("64K", 65536), ("1M", 1 << 20), ("2G", 2 << 30), ("16MiB", 16 << 20), (5, 5)],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


def test_parse_size_rejects_garbage():
    with pytest.raises(ValueError, match="not a size: 'lots'"):
        parse_size("lots")


def test_fit_size_counts_like_nccl_tests():
    assert fit_size("all_reduce", 8, 4, 2) == (8, 2)
    assert fit_size("all_gather", 2 << 30, 4, 2) == (2 << 30, 268435456)
    assert fit_size("reduce_scatter", 12, 4, 2) == (8, 1)
    assert fit_size("all_reduce", 3, 4, 2) == (4, 1)  # at least one element


def test_parse_reference_outputs():
    ar = parse_nccl_tests((REFERENCE / "nccl_all_reduce.txt").read_text())
    assert ar["collective"] == "all_reduce" and len(ar["rows"]) == 15
    last = ar["rows"][-1]
    assert last["bytes"] == 2147483648 and last["busbw"] == 340.66 and last["time_us"] == 6303.83
    ag = parse_nccl_tests((REFERENCE / "nccl_all_gather.txt").read_text())
    assert ag["collective"] == "all_gather" and ag["rows"][-1]["count"] == 268435456
    sr = parse_nccl_tests((REFERENCE / "nccl_sendrecv.txt").read_text())
    assert sr["collective"] == "send_recv"


def test_parse_ignores_non_rows():
    assert parse_nccl_tests("# nothing here\nhello world\n") == {"collective": None, "rows": []}
