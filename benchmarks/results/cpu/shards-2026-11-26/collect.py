"""results.json and table.md of the shards benchmark, from what commands.sh left.

python collect.py W OUT: W the run's private folder (bench/ under it), OUT this folder.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

RUNS = ("one-a", "two-a", "one-b", "two-b")
HEADER = re.compile(r"predicted ([\d.]+) s \(shards: ([\d., ]+) s")


def _shard(summary: dict, after: dict | None) -> dict:
    job = Path(summary["job_dir"])
    log = (job / "rank0.log").read_text().splitlines()
    head = next(line for line in log if line.startswith("rankgate shard"))
    expected = json.loads((job / "shard.json").read_text())["expected"]
    measured = round(sum(after.get(i, 0.0) for i in expected), 1) if after else None
    return {
        "shard": summary["shard"],
        "job": summary["job_id"],
        "node": summary["node"],
        "tests": len(expected),
        "running_s": summary["running_s"],
        "queued_s": summary["queued_s"],
        "predicted_test_s": float(HEADER.search(head).group(1)),
        "measured_test_s_this_run": measured,
        "header": head,
    }


def _run(bench: Path, name: str) -> dict:
    timing = dict(kv.split("=") for kv in (bench / f"{name}.time").read_text().split())
    summary = json.loads((bench / f"{name}.out").read_text().strip().splitlines()[-1])
    row = {
        "run": name,
        "exit": int(timing["rc"]),
        "wall_s": round(float(timing["wall"]), 1),
        "load_1min_before": float(timing["load_before"]),
        "load_1min_after": float(timing["load_after"]),
    }
    if "shards" in summary:
        stored = bench / "durations-after-two-a.json"
        after = json.loads(stored.read_text()) if name == "two-a" else None
        row["verdict"] = summary["merged"]["counts"]
        row["shards"] = [_shard(s, after) for s in summary["shards"]]
    else:
        verdicts = [t["verdict"] for t in summary["tests"]]
        row["verdict"] = {k: verdicts.count(k) for k in ("passed", "skipped", "failed")}
        row.update(job=summary["job_id"], node=summary["node"], running_s=summary["running_s"])
    return row


def _line(r: dict) -> str:
    v = r["verdict"]
    if "shards" in r:
        per = "<br>".join(
            f"shard {s['shard']}: {s['node']}, {s['tests']} tests, {s['running_s']}, "
            f"{s['predicted_test_s']}, {s['measured_test_s_this_run'] or '-'}"
            for s in r["shards"]
        )
        jobs, verdict = len(r["shards"]), f"{v['passed']} passed, {v['skipped']} skipped, "
        verdict += f"{v['not run']} not run"
    else:
        per = f"{r['node']}, 446 tests, {r['running_s']}, -, -"
        jobs, verdict = 1, f"{v['passed']} passed, {v['skipped']} skipped"
    load = f"{r['load_1min_before']} / {r['load_1min_after']}"
    return (
        f"| {r['run']} | {jobs} | {r['wall_s']} | {per} | {verdict} (exit {r['exit']}) | {load} |"
    )


def main(work: Path, out: Path) -> None:
    runs = [_run(work / "bench", name) for name in RUNS]
    (out / "results.json").write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    lines = [
        "| run | jobs | wall (s) | per job: node, tests, running (s), predicted test time (s), "
        "measured test time (s) | verdict | load 1 min before / after |",
        "|---|---|---|---|---|---|",
        *(_line(r) for r in runs),
    ]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
