"""Was this machine busy with other work while a benchmark ran? Measured, not guessed.

CPU timings on a shared machine (a CI runner with neighbours, a laptop compiling) vary
several-fold with load: on this project's 2-core box with other jobs running, the
harness's per-test overhead at world 4 ranged 2.7-7.9 ms between back-to-back runs.
:class:`Window` brackets one benchmark run and measures the CPU time the whole machine
spent (``/proc/stat``) against what this process and its children spent
(``getrusage``): the rest went to other work. ``rankgate bench compare`` does not judge
a load-sensitive metric of a run during which other work took more than
:data:`MAX_OTHERS_SHARE` of the machine, and says so.
"""

from __future__ import annotations

import os
import resource
import time

PROBE_KEY = "rankgate_contention"
"""The key of the probe's JSON line in a benchmark's --json output."""
MAX_OTHERS_SHARE = 0.15
"""Other work above this share of all CPUs during a run makes the run contended."""


class Window:
    """CPU time of the machine and of this process tree over one run."""

    def __init__(self) -> None:
        self._start = _snapshot()

    def close(self) -> dict:
        """The run's figures: wall seconds, own and others' share of all CPUs."""
        end = _snapshot()
        wall = end["wall"] - self._start["wall"]
        cpus = os.cpu_count() or 1
        capacity = wall * cpus
        own = end["own"] - self._start["own"]
        probe = {"seconds": round(wall, 2), "cpus": cpus, "own_share": round(own / capacity, 3)}
        if end["busy"] is not None and self._start["busy"] is not None and capacity > 0:
            others = max(0.0, end["busy"] - self._start["busy"] - own)
            probe["others_share"] = round(min(others / capacity, 1.0), 3)
        return probe


def contended(probes: list[dict]) -> str:
    """Why these probes show a busy machine ("" if they do not), in words."""
    shares = [p["others_share"] for p in probes if "others_share" in p]
    worst = max(shares, default=0.0)
    if worst > MAX_OTHERS_SHARE:
        return f"other work took up to {100 * worst:.0f}% of the CPUs during a run"
    return ""


def _snapshot() -> dict:
    own = sum(
        getattr(resource.getrusage(who), field)
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        for field in ("ru_utime", "ru_stime")
    )
    return {"wall": time.monotonic(), "own": own, "busy": _busy_seconds()}


def _busy_seconds() -> float | None:
    """CPU seconds all CPUs spent busy since boot (Linux /proc/stat); None elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    values = [int(v) for v in fields[1:9]]
    busy = sum(values) - values[3] - values[4]
    return busy / os.sysconf("SC_CLK_TCK")
