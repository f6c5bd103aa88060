"""Run a command in a cgroup v1 cpuacct group of its own; report its wall time, its whole
process tree's CPU seconds, the machine's busy CPU seconds meanwhile (as
scripts/ci/cpu_busy.sh counts them: every process, ours and others'), the load, and the
pool ranks it started (children of a multiprocessing fork server) with the most alive at
once: all of them (inner pytest sessions' pools too) and the outer session's (a fork
server started by the command's pytest or by one of its xdist workers). Only the group's
own pids are read (every 0.2 s), so the watch costs little.

    python rank-budget-2026-11-29-measure.py LABEL -- COMMAND ...
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.2


def machine_busy() -> tuple[int, int]:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return user + nice + system + irq + softirq + steal, sum(map(int, fields[:8]))


def parent_and_cmd(pid: int) -> tuple[int, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, UnicodeDecodeError):
        return None
    return int(stat[stat.rindex(b")") + 2 :].split()[1]), cmd


def main() -> None:
    label, rest = sys.argv[1], sys.argv[2:]
    args = rest[1:] if rest[:1] == ["--"] else rest
    group = Path(f"/sys/fs/cgroup/cpuacct/rankbudget{os.getpid()}")
    group.mkdir()
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    busy0, total0 = machine_busy()
    start = time.monotonic()
    proc = subprocess.Popen(args, preexec_fn=lambda: (group / "tasks").write_text(str(os.getpid())))
    known: dict[int, tuple[int, str]] = {}
    rank_pids: set[int] = set()
    outer_pids: set[int] = set()
    peak_ranks = peak_outer = 0
    while proc.poll() is None:
        pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        for pid in pids:  # read again each time: a new process may not have exec'd yet
            if (seen := parent_and_cmd(pid)) is not None:
                known[pid] = seen
        # A rank is forked by a fork server and keeps its command line.
        forked = {p for p, (_, cmd) in known.items() if "multiprocessing.forkserver" in cmd}
        servers = {p for p in forked if known[p][0] not in forked}
        live = {p for p in pids if p in forked and known[p][0] in servers}
        outer_servers = {  # started by the command or by one of its children (xdist workers)
            s for s in servers if proc.pid in (known[s][0], known.get(known[s][0], (0,))[0])
        }
        outer = {p for p in live if known[p][0] in outer_servers}
        rank_pids |= live
        outer_pids |= outer
        peak_ranks = max(peak_ranks, len(live))
        peak_outer = max(peak_outer, len(outer))
        time.sleep(POLL_S)
    wall = time.monotonic() - start
    busy1, total1 = machine_busy()
    # Processes the command left behind (a fork server still exiting) are counted until
    # they end, up to a minute; the group is removed when they are gone.
    lingering = [int(p) for p in (group / "cgroup.procs").read_text().split()]
    deadline = time.monotonic() + 60
    while (group / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
        time.sleep(POLL_S)
    cpu = int((group / "cpuacct.usage").read_text()) / 1e9
    left = [int(p) for p in (group / "cgroup.procs").read_text().split()]
    if not left:
        group.rmdir()
    hz = os.sysconf("SC_CLK_TCK")
    print("measure: " + json.dumps({
        "label": label, "rc": proc.returncode, "wall_s": round(wall, 1),
        "tree_cpu_s": round(cpu, 1), "machine_busy_cpu_s": round((busy1 - busy0) / hz, 1),
        "machine_busy_pct": round(100 * (busy1 - busy0) / max(1, total1 - total0)),
        "load_before": load_before, "load_after": Path("/proc/loadavg").read_text().split()[:3],
        "pool_rank_starts": len(rank_pids), "peak_live_pool_ranks": peak_ranks,
        "outer_pool_rank_starts": len(outer_pids), "peak_live_outer_pool_ranks": peak_outer,
        "left_behind_at_exit": len(lingering), "left_after_60s": len(left),
    }), file=sys.stderr, flush=True)  # fmt: skip
    sys.exit(proc.returncode)


main()
