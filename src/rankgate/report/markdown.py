"""``out/summary.md``: the report for a CI job's summary page ($GITHUB_STEP_SUMMARY).

The verdict, the stages, each failed test with its failing ranks, message, reproduction
line and the failing ranks' tracebacks folded (cut to their last lines: a job summary
holds at most 1 MiB), and each benchmark comparison's regressions.
"""

from __future__ import annotations

from rankgate.harness import rankwords
from rankgate.report.collect import ReportData
from rankgate.report.failures import FailedTest

TRACEBACK_LINES = 40
"""A failing rank's traceback keeps its last lines, where the error is."""


def render_markdown(data: ReportData) -> str:
    totals = data.summary.get("totals") or {}
    verdict = "passed" if data.ok else "FAILED"
    counts = ", ".join(
        f"{totals[k]} {k}" for k in ("passed", "failed", "error", "skipped") if k in totals
    )
    lines = [f"## rankgate: {verdict}", ""]
    if totals:
        lines += [f"{totals.get('tests', 0)} tests: {counts}", ""]
    if data.stages:
        lines += ["| stage | result | time | reason / note |", "|---|---|---|---|"]
        for s in data.stages:
            status = s["status"] if s["status"] == "passed" else f"**{s['status'].upper()}**"
            why = s.get("reason") or ""
            if s.get("selected") and s["selected"] != why:
                why = "; ".join(filter(None, (why, f"ran: {s['selected']}")))
            lines.append(
                f"| {s['stage']} | {status} | {float(s.get('seconds') or 0):.1f} s | {_cell(why)} |"
            )
        lines.append("")
    if data.failures:
        lines += [f"### Failed tests ({len(data.failures)})", ""]
        for test in data.failures:
            lines += _failure(test)
    for table in data.bench:
        if table.verdicts:
            bad = [n for n in table.notes if " at " in n and "%" in n] or ["no regression"]
            lines += [f"### {table.title}", "", *(f"- {n}" for n in table.notes or bad), ""]
    lines.append("The full report, with every rank's log and the plots: `out/report.html`.")
    return "\n".join(lines) + "\n"


def _failure(test: FailedTest) -> list[str]:
    head = f"- **`{test.id}`** "
    if test.ranks:
        head += rankwords.outcomes_line({r.rank: r.outcome for r in test.ranks})
    else:
        head += test.outcome
    lines = [head]
    if test.message:
        lines.append(f"  {_cell(test.message)}")
    if test.reproduce:
        lines.append(f"  `{test.reproduce}`")
    shown = [r for r in test.ranks if r.bad and r.traceback]
    texts = [(f"rank {r.rank} traceback", r.traceback) for r in shown]
    if not test.ranks and test.text:
        texts = [("traceback", test.text)]
    for title, text in texts:
        tail = "\n".join(text.strip().splitlines()[-TRACEBACK_LINES:]).replace("```", "'''")
        lines += [
            f"  <details><summary>{title}</summary>",
            "",
            "  ```",
            tail,
            "  ```",
            "  </details>",
        ]
    lines.append("")
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
