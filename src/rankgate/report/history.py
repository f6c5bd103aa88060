"""The trend over earlier runs: a series per metric and the tests whose outcome changed.

Each earlier run is the JSON ``rankgate report`` writes (``out/report.json``, format
:data:`REPORT_FORMAT`); ``--history DIR`` names a folder of them (CI: the last runs'
artifacts). Runs are ordered by when they were generated; the current run comes last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rankgate.report.junitfile import ReportInputError
from rankgate.report.results import BAD_OUTCOMES

RED = (*BAD_OUTCOMES, "not run")

REPORT_FORMAT = "rankgate.report/1"
COUNTED = ("tests", "passed", "failed", "error", "skipped", "xfailed")
"""Totals followed from run to run."""


@dataclass(slots=True)
class Trend:
    runs: list[str]
    """One label per run, oldest first, this run last (time and commit)."""
    series: dict[str, list[float | None]]
    """metric -> one value per run (None where a run lacks it)."""
    changes: dict[str, list[str]] = field(default_factory=dict)
    """new failures / fixed / newly skipped since the last run: test ids."""

    def to_json(self) -> dict:
        return {"runs": self.runs, "series": self.series, "changes": self.changes}


def read_history(folder: Path) -> list[dict]:
    """Every earlier report JSON in ``folder``, oldest first; bad files are input errors."""
    if not folder.is_dir():
        raise ReportInputError(f"--history {folder}: not a folder of earlier report.json files")
    runs = []
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ReportInputError(f"{path}: not JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != REPORT_FORMAT:
            raise ReportInputError(
                f"{path}: not a report JSON (format {REPORT_FORMAT!r}, written by rankgate "
                "report as out/report.json)"
            )
        if not isinstance(doc.get("tests"), dict) or not isinstance(doc.get("totals"), dict):
            raise ReportInputError(f"{path}: a report JSON without its 'tests' and 'totals'")
        runs.append(doc)
    return sorted(runs, key=lambda d: str(d.get("generated", "")))


def metrics_of(doc: dict) -> dict[str, float]:
    """The numbers one run is followed by: totals, stage times, benchmark figures."""
    found: dict[str, float] = {}
    totals = doc.get("totals") or {}
    for key in COUNTED:
        if isinstance(totals.get(key), (int, float)):
            found[f"tests {key}"] = totals[key]
    for row in doc.get("stages") or []:
        if isinstance(row, dict) and isinstance(row.get("seconds"), (int, float)):
            found[f"stage {row.get('stage')} (s)"] = round(float(row["seconds"]), 2)
    for name, value in (doc.get("metrics") or {}).items():
        if isinstance(value, (int, float)):
            found[name] = value
    return found


def trend(earlier: list[dict], current: dict) -> Trend | None:
    """The trend of ``earlier`` runs and ``current``; None without earlier runs."""
    if not earlier:
        return None
    runs = [*earlier, current]
    per_run = [metrics_of(d) for d in runs]
    names = list(dict.fromkeys(k for m in per_run for k in m))
    series = {k: [m.get(k) for m in per_run] for k in names}
    labels = [_label(d) for d in runs]
    return Trend(runs=labels, series=series, changes=changes(earlier[-1], current))


def changes(last: dict, current: dict) -> dict[str, list[str]]:
    """Tests whose outcome changed between two runs' ``tests`` maps."""
    before, now = last.get("tests") or {}, current.get("tests") or {}
    found: dict[str, list[str]] = {"new failures": [], "fixed": [], "newly skipped": []}
    for test, outcome in now.items():
        was = before.get(test)
        if outcome in RED and was not in RED:
            found["new failures"].append(test)
        elif outcome == "passed" and was in RED:
            found["fixed"].append(test)
        elif outcome == "skipped" and was is not None and was != "skipped":
            found["newly skipped"].append(test)
    return found


def _label(doc: dict) -> str:
    commit = str((doc.get("run") or {}).get("commit") or "")[:8]
    when = str(doc.get("generated", ""))[:16].replace("T", " ")
    return f"{when} {commit}".strip()
