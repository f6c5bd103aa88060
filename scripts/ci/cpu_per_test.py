"""CPU seconds per test, written one line each to $CPU_PER_TEST_LOG: a pytest plugin.

    PYTHONPATH=scripts/ci CPU_PER_TEST_LOG=cpu.tsv pytest -p cpu_per_test -n 2 -m "dist and not gpu"

Each line: wall, this process's CPU, its reaped children's CPU (a launcher and its
ranks), the growth of its live descendants (the pool's ranks, a Ray or SLURM it
started) and the node ID, tab-separated. On 2 cores the stage's time is its CPU: this
says which tests to make cheaper. Processes that left the tree (reparented daemons)
are not counted; compare the sum with the machine's busy time (scripts/ci/cpu_busy.sh).
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest

_TICK = os.sysconf("SC_CLK_TCK")


def _descendants_cpu() -> dict[int, float]:
    """pid -> user+system CPU seconds, for every live process below this one."""
    children: dict[int, list[tuple[int, float]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after the command name
        parent, cpu = int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK
        children.setdefault(parent, []).append((int(entry), cpu))
    found, todo = {}, [os.getpid()]
    while todo:
        for pid, cpu in children.get(todo.pop(), []):
            found[pid] = cpu
            todo.append(pid)
    return found


def _own_and_reaped() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start, (own0, reaped0), live0 = time.monotonic(), _own_and_reaped(), _descendants_cpu()
    yield
    (own1, reaped1), live1 = _own_and_reaped(), _descendants_cpu()
    live = sum(cpu - live0.get(pid, 0.0) for pid, cpu in live1.items())
    line = (
        f"{time.monotonic() - start:.2f}\t{own1 - own0:.2f}\t{reaped1 - reaped0:.2f}"
        f"\t{live:.2f}\t{item.nodeid}\n"
    )
    with open(os.environ.get("CPU_PER_TEST_LOG", "cpu_per_test.tsv"), "a") as log:
        log.write(line)
