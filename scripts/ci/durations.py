"""Summarise a timed .ci/run (scripts/ci/measure.sh LOGDIR) as ci-durations.txt.

    python scripts/ci/durations.py LOGDIR [--title TEXT] > benchmarks/results/cpu/ci-durations.txt

Set-up steps from the traced set-up (one timestamp per command), each stage's wall time,
exit code, test counts and the load average before and after it, the 30 slowest test
phases over all stages, each stage's slowest files, and every stage's ``--durations=0``
list. On a shared machine the seconds are noisy; the order is what carries over.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from pathlib import Path

DURATION = re.compile(r"^(\d+\.\d+)s (call|setup|teardown)\s+(\S.*)$")
SUMMARY = re.compile(r"^=+ (.*) in ([\d.]+)s.*=+$")
TRACE = re.compile(r"^\++ (\d+\.\d+) (.*)$")


def setup_steps(trace: Path) -> list[tuple[float, str]]:
    """(seconds, command) for each traced set-up command, from consecutive timestamps."""
    stamps = [
        (float(m[1]), m[2]) for line in trace.read_text().splitlines() if (m := TRACE.match(line))
    ]
    return [(nxt[0] - cur[0], cur[1]) for cur, nxt in itertools.pairwise(stamps)]


def stage_durations(log: Path) -> list[tuple[float, str, str]]:
    """(seconds, phase, node ID) from a stage log's --durations=0 list."""
    return [
        (float(m[1]), m[2], m[3])
        for line in log.read_text().splitlines()
        if (m := DURATION.match(line))
    ]


def summary(log: Path) -> str:
    found = [m for line in log.read_text().splitlines() if (m := SUMMARY.match(line.strip()))]
    return f"{found[-1][1]} (pytest {found[-1][2]} s)" if found else "no pytest summary"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/ci/durations.py")
    parser.add_argument("logdir", type=Path)
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    logs: Path = args.logdir
    if not (logs / "times").is_file():
        print(
            f"durations: {logs}/times not found: run scripts/ci/measure.sh first", file=sys.stderr
        )
        return 2

    def load(name: str) -> str:
        path = logs / f"loadavg.{name}"
        if not path.is_file():
            return "?"
        return " -> ".join(line.split()[0] for line in path.read_text().splitlines())

    out = [f"# {args.title}" if args.title else "# .ci/run, timed step by step"]
    out.append("# made by scripts/ci/measure.sh CHECKOUT LOGDIR; scripts/ci/durations.py LOGDIR")
    out.append("# load = 1-minute load average before -> after the step (2 cores; shared machine)")
    out.append("")
    out.append("## steps (seconds)")
    stages = []
    for line in (logs / "times").read_text().splitlines():
        name, seconds, *rest = line.split()
        extra = ""
        if (logs / f"{name}.log").is_file() and name not in ("setup", "install"):
            extra = summary(logs / f"{name}.log")
            stages.append(name)
        code = " ".join(rest)
        row = f"{name:<10} {float(seconds):8.1f}  {code:<5} load {load(name):<12} {extra}"
        out.append(row.rstrip())
    out.append(f"load at start {load('start')}, at end {load('end')}")
    if (logs / "container.log").is_file():
        text = (logs / "container.log").read_text()
        tests = [m for line in text.splitlines() if (m := SUMMARY.match(line.strip()))]
        bases = re.findall(r"base-image: \S+ ready in (\d+) s", text)
        for line in (logs / "times").read_text().splitlines():
            if line.startswith("container ") and tests:
                build = float(line.split()[1]) - float(tests[-1][2])
                base = f" (of which the debootstrap base {bases[-1]} s)" if bases else ""
                out.append(
                    f"container: image build and nox {build:.0f} s{base}, tests {tests[-1][2]} s"
                )
    if (logs / "setup.trace").is_file():
        out.append("")
        out.append("## set-up commands taking 0.5 s or more")
        for seconds, command in setup_steps(logs / "setup.trace"):
            if seconds >= 0.5:
                out.append(f"{seconds:8.1f}  {command}")
    every = [
        (s, phase, node, stage)
        for stage in stages
        for s, phase, node in stage_durations(logs / f"{stage}.log")
    ]
    out.append("")
    out.append("## the 30 slowest test phases, all stages")
    for seconds, phase, node, stage in sorted(every, reverse=True)[:30]:
        out.append(f"{seconds:8.2f}  {stage:<9} {phase:<8} {node}")
    for stage in stages:
        rows = stage_durations(logs / f"{stage}.log")
        if not rows:
            continue
        files: dict[str, float] = {}
        for seconds, _, node in rows:
            files[node.split("::", 1)[0]] = files.get(node.split("::", 1)[0], 0.0) + seconds
        out.append("")
        out.append(f"## {stage}: slowest files (sum of phases)")
        for path, seconds in sorted(files.items(), key=lambda kv: -kv[1])[:10]:
            out.append(f"{seconds:8.1f}  {path}")
    for stage in stages:
        rows = stage_durations(logs / f"{stage}.log")
        if rows:
            out.append("")
            out.append(f"## {stage}: --durations=0 ({len(rows)} phases of 0.005 s or more)")
            out += [f"{s:8.2f}  {phase:<8} {node}" for s, phase, node in rows]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
