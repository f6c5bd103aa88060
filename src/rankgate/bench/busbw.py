"""nccl-tests arithmetic: message sizes, algorithm and bus bandwidth, and its output format.

As in nccl-tests (doc/PERFORMANCE.md): ``algbw = size / time`` with size in bytes as
nccl-tests counts it (the whole buffer; for all_gather the gathered output, for
reduce_scatter the input), and ``busbw = algbw x factor``, the factor making the
figure comparable to the hardware's link bandwidth whatever the rank count n:

=============================  ==============
all_reduce                     2(n-1)/n
all_gather, reduce_scatter     (n-1)/n
gather                         (n-1)/n
broadcast, send_recv           1
=============================  ==============

Bandwidths are in GB/s (1e9 bytes per second), times in microseconds.
"""

from __future__ import annotations

import re

BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}
COLLECTIVES = tuple(BUS_FACTORS)

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def bus_factor(collective: str, world: int) -> float:
    try:
        return BUS_FACTORS[collective](world)
    except KeyError:
        raise ValueError(
            f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}"
        ) from None


def algbw(nbytes: int, seconds: float) -> float:
    """GB/s moved by one call of ``nbytes`` taking ``seconds``."""
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw(collective: str, nbytes: int, seconds: float, world: int) -> float:
    return algbw(nbytes, seconds) * bus_factor(collective, world)


def parse_size(text: str | int) -> int:
    """Bytes from '8', '64K', '1M', '2G' (binary units, as nccl-tests' -b/-e)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*", str(text), flags=re.IGNORECASE)
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 8, 64K, 1M, 2G)")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def message_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """min, min*factor, ... up to max (inclusive), as nccl-tests' -b -e -f."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"need 1 <= min ({min_bytes}) <= max ({max_bytes})")
    if factor < 2:
        raise ValueError(f"factor must be >= 2, got {factor}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def fit_size(collective: str, nbytes: int, itemsize: int, world: int) -> tuple[int, int]:
    """(bytes, count) nccl-tests would use for a requested size.

    count is elements per rank for all_gather / reduce_scatter (as nccl-tests prints
    it) and of the whole buffer otherwise; bytes is rounded down so it divides.
    """
    per = itemsize * (world if collective in ("all_gather", "reduce_scatter", "gather") else 1)
    units = max(nbytes // per, 1)
    return units * per, units


_NCCL_TESTS_NAMES = {
    "all_reduce_perf": "all_reduce",
    "all_gather_perf": "all_gather",
    "reduce_scatter_perf": "reduce_scatter",
    "broadcast_perf": "broadcast",
    "sendrecv_perf": "send_recv",
    "gather_perf": "gather",
}


def parse_nccl_tests(text: str) -> dict:
    """The collective and out-of-place rows of one nccl-tests output.

    Returns {"collective": name or None, "rows": [{bytes, count, type, redop, root,
    time_us, algbw, busbw, wrong}]}; in-place columns are ignored.
    """
    collective = None
    rows = []
    for line in text.splitlines():
        m = re.search(r"Collective test starting: (\w+)", line)
        if m:
            collective = _NCCL_TESTS_NAMES.get(m.group(1), m.group(1))
            continue
        parts = line.split()
        if len(parts) < 9 or line.lstrip().startswith("#") or not parts[0].isdigit():
            continue
        try:
            rows.append(
                {
                    "bytes": int(parts[0]),
                    "count": int(parts[1]),
                    "type": parts[2],
                    "redop": parts[3],
                    "root": int(parts[4]),
                    "time_us": float(parts[5]),
                    "algbw": float(parts[6]),
                    "busbw": float(parts[7]),
                    "wrong": parts[8],
                }
            )
        except ValueError:
            continue
    return {"collective": collective, "rows": rows}
