"""Run a command; report its wall time, its whole process tree's CPU seconds (a cgroup v1
cpuacct group when one can be made, else the sampled sum), and every process it started,
by kind, sampled from /proc every 50 ms.

    python proctrack.py [--json FILE] [--peak-ranks] -- COMMAND ...
"""
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def stat(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    rest = raw[raw.rindex(b")") + 2:].split()
    ppid = int(rest[1])
    cpu = (int(rest[11]) + int(rest[12])) / TICK
    return ppid, cpu, cmd


def kind(cmd, parent_kind):
    if parent_kind == "forkserver":
        return "pool rank"
    if "multiprocessing.forkserver" in cmd or "rankgate.harness.pool.forkserver" in cmd:
        return "forkserver"
    if "multiprocessing.spawn" in cmd or "spawn_main" in cmd:
        return "spawned (torch.multiprocessing / mp spawn)"
    if "exec(eval(sys.stdin.readline()))" in cmd or "execnet" in cmd:
        return "xdist worker"
    if "torchrun" in cmd or "torch.distributed.run" in cmd:
        return "torchrun"
    if "mpirun" in cmd or "orted" in cmd or "prted" in cmd or "prterun" in cmd:
        return "mpi launcher"
    if "srun" in cmd.split()[:2] or "slurmstepd" in cmd:
        return "slurm"
    if "podman" in cmd or "buildah" in cmd or "conmon" in cmd:
        return "container"
    if "pytest" in cmd:
        return "pytest" if parent_kind in ("launcher child", None) else "pytest (inner or rank)"
    if cmd.startswith(("/bin/sh", "sh ", "bash", "/bin/bash", "/usr/bin/bash")):
        return "shell"
    return "other: " + os.path.basename(cmd.split()[0]) if cmd.split() else "other"


def main():
    args = sys.argv[1:]
    out = None
    if args[:1] == ["--json"]:
        out, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    cg = f"/sys/fs/cgroup/cpuacct/proctrack{os.getpid()}"
    try:
        os.mkdir(cg)
    except OSError:
        cg = None
    start = time.monotonic()
    def into_cgroup():
        if cg:
            with open(f"{cg}/tasks", "w") as f:
                f.write(str(os.getpid()))
    proc = subprocess.Popen(args, preexec_fn=into_cgroup)
    root = {"kind": "root", "cmd": " ".join(args)[:200], "cpu": 0.0, "ppid": os.getpid()}
    seen = {proc.pid: root}
    peak = Counter()
    while proc.poll() is None:
        live = Counter()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            s = stat(pid)
            if s is None:
                continue
            ppid, cpu, cmd = s
            if pid in seen:
                seen[pid]["cpu"] = cpu
                if pid != proc.pid and cmd and cmd[:300] != seen[pid]["cmd"]:
                    # it exec'd since first seen (a spawn is seen with its parent's command)
                    seen[pid]["cmd"] = cmd[:300]
                    seen[pid]["kind"] = kind(cmd, seen.get(seen[pid]["ppid"], {}).get("kind"))
            elif ppid in seen:
                what = kind(cmd, seen[ppid]["kind"])
                seen[pid] = {"kind": what, "cmd": cmd[:300], "cpu": cpu, "ppid": ppid}
            else:
                continue
            live[seen[pid]["kind"]] += 1
        for k, v in live.items():
            peak[k] = max(peak[k], v)
        time.sleep(0.05)
    wall = time.monotonic() - start
    cpu_cg = None
    if cg:
        with open(f"{cg}/cpuacct.usage") as f:
            cpu_cg = int(f.read()) / 1e9
        try:
            os.rmdir(cg)
        except OSError:
            pass
    by = {}
    for p in seen.values():
        e = by.setdefault(p["kind"], {"starts": 0, "cpu_s_sampled": 0.0})
        e["starts"] += 1
        e["cpu_s_sampled"] = round(e["cpu_s_sampled"] + p["cpu"], 2)
    report = {"rc": proc.returncode, "wall_s": round(wall, 2), "cpu_s": cpu_cg and round(cpu_cg, 2),
              "starts_by_kind": by, "peak_live_by_kind": dict(peak),
              "load_after": Path("/proc/loadavg").read_text().split()[:3]}
    if out:
        with open(out, "w") as f:
            json.dump({**report, "processes": list(seen.values())}, f, indent=1)
    print("proctrack:", json.dumps(report), file=sys.stderr)
    sys.exit(proc.returncode)


main()
