"""Where a CI run's CPU goes: per stage, per test file and per kind of process start.

    python scripts/ci/profile_run.py OUT.json -- bash .ci/run
    python scripts/ci/profile_run.py OUT.json -- nox -s gate
    python scripts/ci/profile_run.py --table OUT.json     (the tables again, from the file)

Per stage, exactly: each process the gate starts for a stage (a child of nox) and each
set-up command of .ci/run (a child of its bash) is moved into a cgroup v1 cpuacct group of
its own as soon as it is seen (every 50 ms), and its descendants are born there.
What leaves the tree into groups of its own (podman's containers) is the gap between the
groups' sum and the machine's busy CPU-s, printed as such.

Per test file and per kind of process, sampled: every process below the command, its
user+system CPU as last seen (a process living less than 50 ms is missed, the last 50 ms of
one is too), the test that started it (PYTEST_CURRENT_TEST in its first environment, under
an xdist worker or a stage's pytest) and its kind (xdist worker, fork server, pool rank,
torchrun, a pytest rank or inner session, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
STAGE_MARKERS = {
    "unit": "unit", "dist and not gpu": "dist", "hpc": "hpc", "container": "container",
    "perf": "bench",
}  # fmt: skip


def busy_cpu_s() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / TICK


def read_stat(pid: int) -> tuple[int, float] | None:
    """(ppid, CPU-s) of a live process, None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    rest = raw[raw.rindex(b")") + 2 :].split()
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK


def read_cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def started_by_test(pid: int) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for entry in env:
        if entry.startswith(b"PYTEST_CURRENT_TEST="):
            return entry.split(b"=", 1)[1].decode(errors="replace").split("::")[0]
    return None


def stage_of(cmd: str) -> str:
    """The stage (or set-up step) a direct child of the gate or of .ci/run works for."""
    if "rankgate.pipeline.distfiles" in cmd or "rankgate.pipeline.wheel_trial" in cmd:
        return "package"
    if "rankgate.pipeline.container" in cmd:
        return "container"
    if match := re.search(r" -m (?:'([^']*)'|\"([^\"]*)\"|(\S+))", cmd):
        marker = next(group for group in match.groups() if group is not None)
        if marker in STAGE_MARKERS and "pytest" in cmd:
            return STAGE_MARKERS[marker]
    words = cmd.split()
    if "ruff" in cmd or "actionlint" in cmd:
        return "lint"
    if "env-check" in cmd:
        return "env-check"
    if words and os.path.basename(words[0]) in ("uv", "pip", "apt-get"):
        return "set-up: " + os.path.basename(words[0])
    if "pip install" in cmd or " -m pip " in cmd or " -m venv" in cmd:
        return "set-up: pip"
    if "build_ops" in cmd:
        return "set-up: DeepSpeed op"
    if "nox" in cmd:
        return "gate (nox itself)"
    return "set-up: " + (os.path.basename(words[0]) if words else "?")


def kind_of(cmd: str, parent_kind: str) -> str:
    if parent_kind == "fork server":
        return "pool rank (forked)"
    checks = (
        ("multiprocessing.forkserver", "fork server"),
        ("rankgate.harness.pool.forkserver", "fork server"),
        ("spawn_main", "spawned (multiprocessing spawn)"),
        ("exec(eval(sys.stdin.readline()))", "xdist worker"),
        ("torch.distributed.run", "torchrun"),
        ("torchrun", "torchrun"),
        ("mpirun", "mpirun"),
        ("prte", "mpirun"),
        ("orted", "mpirun"),
        ("slurm", "slurm"),
        ("srun", "slurm"),
        ("podman", "podman/buildah"),
        ("buildah", "podman/buildah"),
        ("debootstrap", "debootstrap"),
        ("raylet", "ray"),
        ("ray/", "ray"),
        ("merge-junit", "rankgate merge-junit/report"),
        ("rankgate report", "rankgate merge-junit/report"),
        ("pytest", "pytest (rank or inner session)"),
        ("git ", "git"),
    )
    for needle, kind in checks:
        if needle in cmd:
            return kind
    words = cmd.split()
    return "other: " + (os.path.basename(words[0]) if words else "?")


class Tracker:
    """Every process below the command, sampled; each stage root moved into its group."""

    def __init__(self, root_pid: int, groups: Path | None) -> None:
        self.root_pid = root_pid
        self.groups = groups
        self.seen: dict[int, dict] = {root_pid: {"kind": "root", "stage": "root", "cpu": 0.0,
                                                  "test": None, "cmd": ""}}  # fmt: skip
        self.gate_pids: set[int] = {root_pid}

    def sample(self) -> set[str]:
        """Update every process's CPU; the stages with a live process."""
        live: set[str] = set()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if (state := read_stat(pid)) is None:
                continue
            if pid in self.seen:
                self.seen[pid]["cpu"] = max(self.seen[pid]["cpu"], state[1])
            elif state[0] in self.seen:
                self._adopt(pid, state[0], state[1], read_cmdline(pid))
            else:
                continue
            live.add(self.seen[pid]["stage"])
        return live

    def _adopt(self, pid: int, ppid: int, cpu: float, cmd: str) -> None:
        parent = self.seen[ppid]
        words = cmd.split()[:3]
        if ppid in self.gate_pids and any(os.path.basename(word) == "nox" for word in words):
            self.gate_pids.add(pid)  # the gate's own process: its children are stages
        if ppid in self.gate_pids and pid not in self.gate_pids:
            stage = stage_of(cmd)
            self._into_group(pid, stage)
        else:
            stage = parent["stage"]
        kind = kind_of(cmd, parent["kind"])
        test = parent["test"]
        if test is None and parent["kind"] in ("xdist worker", "stage pytest"):
            test = started_by_test(pid)
        if ppid in self.gate_pids and pid not in self.gate_pids and "pytest" in cmd:
            kind = "stage pytest"
        self.seen[pid] = {"kind": kind, "stage": stage, "cpu": cpu, "test": test,
                          "cmd": cmd[:300]}  # fmt: skip

    def _into_group(self, pid: int, stage: str) -> None:
        if self.groups is None:
            return
        group = self.groups / re.sub(r"[^A-Za-z0-9._-]+", "_", stage)
        group.mkdir(exist_ok=True)
        try:
            (group / "tasks").write_text(str(pid))
        except OSError:
            pass  # gone already


def group_cpu(groups: Path | None) -> dict[str, float]:
    if groups is None:
        return {}
    return {
        group.name: int((group / "cpuacct.usage").read_text()) / 1e9
        for group in sorted(groups.iterdir())
        if group.is_dir()
    }


def run(out: Path, command: list[str]) -> int:
    groups: Path | None = CPUACCT / f"profile-run-{os.getpid()}"
    try:
        groups.mkdir()
    except OSError:
        groups = None
    busy0, start = busy_cpu_s(), time.monotonic()
    proc = subprocess.Popen(command)
    tracker = Tracker(proc.pid, groups)
    stage_first_seen: dict[str, float] = {}
    stage_last_seen: dict[str, float] = {}
    while proc.poll() is None:
        live = tracker.sample()
        now = time.monotonic() - start
        for stage in live:
            stage_first_seen.setdefault(stage, now)
            stage_last_seen[stage] = now
        time.sleep(0.05)
    wall, busy = time.monotonic() - start, busy_cpu_s() - busy0
    report = {
        "command": command,
        "exit": proc.returncode,
        "wall_s": round(wall, 1),
        "machine_busy_cpu_s": round(busy, 1),
        "stage_cpu_s": {name: round(cpu, 1) for name, cpu in group_cpu(groups).items()},
        "stage_seen_s": {
            name: [round(stage_first_seen[name], 1), round(stage_last_seen.get(name, 0), 1)]
            for name in stage_first_seen
        },
        "processes": list(tracker.seen.values()),
    }
    out.write_text(json.dumps(report, indent=1))
    print_tables(report)
    return proc.returncode


def print_tables(report: dict) -> None:
    staged = sum(report["stage_cpu_s"].values())
    print(f"wall {report['wall_s']} s, machine busy {report['machine_busy_cpu_s']} CPU-s, exit "
          f"{report['exit']}; in the stages' groups {staged:.1f} CPU-s")  # fmt: skip
    print("\n| stage or set-up step | CPU-s (group) | seen from-to s |\n|---|---|---|")
    for name, cpu in sorted(report["stage_cpu_s"].items(), key=lambda item: -item[1]):
        seen = report["stage_seen_s"].get(name) or report["stage_seen_s"].get(
            name.replace("_", " "), ["", ""]
        )
        print(f"| {name} | {cpu} | {seen[0]}-{seen[1]} |")
    print(f"| not in a group (escaped: containers, daemons; other processes) | "
          f"{report['machine_busy_cpu_s'] - staged:.1f} | |")  # fmt: skip
    by_kind: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    by_file: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for entry in report["processes"]:
        row = by_kind[(entry["stage"], entry["kind"])]
        row[0] += 1
        row[1] += entry["cpu"]
        if entry["test"]:
            row = by_file[(entry["stage"], entry["test"])]
            row[0] += 1
            row[1] += entry["cpu"]
    sampled = sum(entry["cpu"] for entry in report["processes"])
    print(f"\nSampled processes: {len(report['processes'])}, {sampled:.1f} CPU-s")
    print("\n| stage | kind of process | starts | CPU-s (sampled) |\n|---|---|---|---|")
    for (stage, kind), (starts, cpu) in sorted(by_kind.items(), key=lambda item: -item[1][1]):
        if cpu >= 1 or starts >= 20:
            print(f"| {stage} | {kind} | {starts} | {cpu:.1f} |")
    print("\n| stage | test file (the processes its tests started) | starts | CPU-s (sampled) |")
    print("|---|---|---|---|")
    for (stage, test), (starts, cpu) in sorted(by_file.items(), key=lambda item: -item[1][1])[
        :30
    ]:
        print(f"| {stage} | {test} | {starts} | {cpu:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="print the tables of OUT again")
    parser.add_argument("out", type=Path)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.table:
        print_tables(json.loads(args.out.read_text()))
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to profile after --")
    return run(args.out, command)


if __name__ == "__main__":
    sys.exit(main())
