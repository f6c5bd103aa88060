"""Median ms of each event after the controller began sending a test (tests 20..298)."""

import json
import statistics
from pathlib import Path

ctrl = json.loads(Path("stamps_ctrl.json").read_text())
ranks = [json.loads(Path(f"stamps_rank{i}.json").read_text()) for i in (0, 1)]
rows = []
for t in range(20, len(ctrl["send_start"]) - 1):
    start = ctrl["send_start"][t]
    row = {"send_end": ctrl["send_end"][t] - start}
    for i, rank in enumerate(ranks):
        for event in ("recv", "body_start", "body_end", "result"):
            row[f"r{i}_{event}"] = rank[event][t] - start
    for event in ("await_start", "await_end"):
        row[event] = ctrl[event][t] - start
    row["next_send"] = ctrl["send_start"][t + 1] - start
    rows.append(row)
print(" ".join(f"{k}={1000 * statistics.median(r[k] for r in rows):.3f}" for k in rows[0]))
