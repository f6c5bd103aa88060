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
import itertools
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


def read_stat(pid: int) -> tuple[int, float, int] | None:
    """(ppid, CPU-s, start time in ticks) of a live process, None once it is gone. The
    start time tells a process from a later one that got its pid again."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    rest = raw[raw.rindex(b")") + 2 :].split()
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK, int(rest[19])


def read_argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def started_by_test(pid: int) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for entry in env:
        if entry.startswith(b"PYTEST_CURRENT_TEST="):
            return entry.split(b"=", 1)[1].decode(errors="replace").split("::")[0]
    return None


def stage_of(argv: list[str]) -> str:
    """The stage (or set-up step) a direct child of the gate or of .ci/run works for."""
    cmd = " ".join(argv)
    if "rankgate.pipeline.distfiles" in cmd or "rankgate.pipeline.wheel_trial" in cmd:
        return "package"
    if "rankgate.pipeline.container" in cmd:
        return "container"
    if "pytest" in cmd:
        for flag, marker in itertools.pairwise(argv):
            # the quick gate's: "(unit) and not slow"
            marker = marker.removesuffix(" and not slow").removeprefix("(").removesuffix(")")
            if flag == "-m" and marker in STAGE_MARKERS:
                return STAGE_MARKERS[marker]
    if "ruff" in cmd or "actionlint" in cmd:
        return "lint"
    if "env-check" in cmd:
        return "env-check"
    if argv and os.path.basename(argv[0]) in ("uv", "pip", "apt-get"):
        return "set-up: " + os.path.basename(argv[0])
    if "pip install" in cmd or " -m pip " in cmd or " -m venv" in cmd:
        return "set-up: pip"
    return "set-up: " + (os.path.basename(argv[0]) if argv else "?")


FORKED = "forked (a pool rank, an xdist worker or a warm program)"


def kind_of(cmd: str, parent_kind: str) -> str:
    if parent_kind in ("fork server", FORKED) and "rankgate.harness.pool.forkserver" in cmd:
        # rankgate's fork server forks pool ranks, xdist's workers and the programs the
        # tests launch warm (torchrun, its ranks, inner sessions and their own fork
        # servers): /proc shows each with the first server's command line
        return FORKED
    if parent_kind == "fork server":  # multiprocessing's
        return FORKED
    checks = (
        ("multiprocessing.forkserver", "fork server"),
        ("rankgate.harness.pool.forkserver", "fork server"),
        ("/rankgate-fs-", "warm client (launched in place of python)"),
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


YOUNG_S = 2.0
"""A process's command line is read again while it is this young: a fork shows its
parent's until it execs."""


class Tracker:
    """Every process below the command, sampled; each stage root moved into its group.
    A process is keyed by (pid, start time): pids come round again in a long run."""

    def __init__(self, root_pid: int, groups: Path | None) -> None:
        self.groups = groups
        root = read_stat(root_pid)
        self.root = (root_pid, root[2] if root else 0)
        self.seen: dict[tuple[int, int], dict] = {
            self.root: {"kind": "root", "stage": "root", "cpu": 0.0, "test": None, "cmd": "",
                        "parent": None, "first": 0.0}
        }  # fmt: skip
        self.live: dict[int, tuple[int, int]] = {root_pid: self.root}
        self.gate: set[tuple[int, int]] = {self.root}

    def sample(self, now: float) -> set[str]:
        """Update every process's CPU; the stages with a live process."""
        live: dict[int, tuple[int, int]] = {}
        stages: set[str] = set()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if (state := read_stat(pid)) is None:
                continue
            ppid, cpu, start = state
            key = (pid, start)
            entry = self.seen.get(key)
            if entry is None:
                parent = self.live.get(ppid) or live.get(ppid)
                if parent is None:
                    continue
                entry = self.seen[key] = {"parent": parent, "first": now, "cpu": cpu}
                self._classify(key, read_argv(pid))
            elif entry["parent"] is not None and now - entry["first"] < YOUNG_S:
                argv = read_argv(pid)
                if argv and " ".join(argv)[:300] != entry["cmd"]:
                    self._classify(key, argv)  # it exec'd
            entry["cpu"] = max(entry["cpu"], cpu)
            live[pid] = key
            stages.add(entry["stage"])
        self.live = live
        return stages

    def _classify(self, key: tuple[int, int], argv: list[str]) -> None:
        entry = self.seen[key]
        parent = self.seen[entry["parent"]]
        cmd = " ".join(argv)
        from_gate = entry["parent"] in self.gate
        if from_gate and any(os.path.basename(word) == "nox" for word in argv[:3]):
            self.gate.add(key)  # the gate's own process: its children are stages
        else:
            # nox's child seen before it exec'd (nox's argv then) is a stage once it has:
            # kept as the gate, the unit stage's processes read as set-up steps.
            self.gate.discard(key)
        if from_gate and key not in self.gate:
            entry["stage"] = stage_of(argv)
            self._into_group(key[0], entry["stage"])
        else:
            entry["stage"] = parent["stage"]
        entry["kind"] = kind_of(cmd, parent["kind"])
        if from_gate and key not in self.gate and "pytest" in cmd:
            entry["kind"] = "stage pytest"
        entry["test"] = parent["test"]
        # xdist's workers are forked from rankgate's fork server (kind FORKED): what their
        # tests start carries PYTEST_CURRENT_TEST in the environment it began with (what a
        # pool rank starts may name the test whose set-up started the pool instead)
        if entry["test"] is None and parent["kind"] in ("xdist worker", "stage pytest", FORKED):
            entry["test"] = started_by_test(key[0])
        entry["cmd"] = cmd[:300]

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
        now = time.monotonic() - start
        live = tracker.sample(now)
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
        "processes": [
            {key: value for key, value in entry.items() if key not in ("parent", "first")}
            for entry in tracker.seen.values()
        ],
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
    for (stage, test), (starts, cpu) in sorted(by_file.items(), key=lambda item: -item[1][1])[:30]:
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
