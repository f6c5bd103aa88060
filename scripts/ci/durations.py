"""Summarise a timed .ci/run (scripts/ci/measure.sh LOGDIR) as ci-durations.txt.

    python scripts/ci/durations.py LOGDIR [--title TEXT] > benchmarks/results/cpu/ci-durations.txt

Set-up steps from the traced set-up (one timestamp per command); the test command's
wall time and each stage's seconds, verdict and test counts from the gate's gate.json;
the 30 slowest tests over all stages and each stage's slowest files and tests, from the
stages' JUnit files (a test's time is the sum of its phases). On a shared machine the
seconds are noisy; the order is what carries over.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

TRACE = re.compile(r"^\++ (\d+\.\d+) (.*)$")


def setup_steps(trace: Path) -> list[tuple[float, str]]:
    """(seconds, command) for each traced set-up command, from consecutive timestamps."""
    stamps = [
        (float(m[1]), m[2]) for line in trace.read_text().splitlines() if (m := TRACE.match(line))
    ]
    return [(nxt[0] - cur[0], cur[1]) for cur, nxt in itertools.pairwise(stamps)]


def junit_times(path: Path) -> list[tuple[float, str]]:
    """(seconds, node ID) of every test case in a JUnit file."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        cases.append((float(case.get("time") or 0.0), f"{module}::{case.get('name')}"))
    return cases


def _counts(tests: dict[str, int]) -> str:
    return ", ".join(f"{n} {outcome}" for outcome, n in tests.items() if n) or "no tests"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/ci/durations.py")
    parser.add_argument("logdir", type=Path)
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    logs: Path = args.logdir
    missing = [name for name in ("times", "gate.json") if not (logs / name).is_file()]
    if missing:
        print(
            f"durations: {', '.join(missing)} not found in {logs}: run scripts/ci/measure.sh "
            "first",
            file=sys.stderr,
        )
        return 2

    def load(name: str) -> str:
        path = logs / f"loadavg.{name}"
        if not path.is_file():
            return "?"
        return " -> ".join(line.split()[0] for line in path.read_text().splitlines())

    out = [f"# {args.title}" if args.title else "# .ci/run, timed step by step"]
    out.append("# made by scripts/ci/measure.sh CHECKOUT LOGDIR; scripts/ci/durations.py LOGDIR")
    out.append("# load = 1-minute load average before -> after the step (2 cores)")
    out.append("")
    out.append("## steps (seconds)")
    for line in (logs / "times").read_text().splitlines():
        name, seconds, *rest = line.split()
        out.append(f"{name:<10} {float(seconds):8.1f}  {' '.join(rest):<5} load {load(name)}")
    out.append("")
    out.append("## the test command's stages (gate.json; hpc and container in the background)")
    gate = json.loads((logs / "gate.json").read_text())
    for row in gate:
        out.append(
            f"{row['stage']:<10} {row['seconds']:8.1f}  {row['status']:<7} {_counts(row['tests'])}"
        )
    if (logs / "setup.trace").is_file():
        out.append("")
        out.append("## set-up commands taking 0.5 s or more")
        for seconds, command in setup_steps(logs / "setup.trace"):
            if seconds >= 0.5:
                out.append(f"{seconds:8.1f}  {command}")
    per_stage = {
        row["stage"]: junit_times(logs / f"{row['stage']}.xml")
        for row in gate
        if (logs / f"{row['stage']}.xml").is_file()
    }
    every = [(s, node, stage) for stage, rows in per_stage.items() for s, node in rows]
    out.append("")
    out.append("## the 30 slowest tests, all stages (JUnit: the sum of a test's phases)")
    for seconds, node, stage in sorted(every, reverse=True)[:30]:
        out.append(f"{seconds:8.2f}  {stage:<9} {node}")
    for stage, rows in per_stage.items():
        files: dict[str, float] = {}
        for seconds, node in rows:
            files[node.split("::", 1)[0]] = files.get(node.split("::", 1)[0], 0.0) + seconds
        out.append("")
        out.append(
            f"## {stage}: {len(rows)} tests, {sum(s for s, _ in rows):.0f} s in all; "
            "slowest files (sum of their tests)"
        )
        for path, seconds in sorted(files.items(), key=lambda kv: -kv[1])[:10]:
            out.append(f"{seconds:8.1f}  {path}")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
