"""``out/summary.md``: the report for a CI job's summary page ($GITHUB_STEP_SUMMARY).

GitHub-flavoured Markdown that CommonMark renders as meant (tests/report renders it
with markdown-it-py): the verdict and the counts of every outcome, the machine, the
stages with their tests and times, each failed test (its ranks, the root-cause rank
first, message, reproduction line, and the bad ranks' tracebacks and hang stacks
folded, cut to their last lines: a job summary holds at most 1 MiB), skips and
expected failures grouped by reason, the slowest tests, benchmark comparisons with
their verdicts, and the trend. Folded blocks sit at the top level, never inside a list
item, and every fence is longer than any run of backticks in its text.
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

from rankgate.harness import verdict_lines
from rankgate.report import present
from rankgate.report.collect import BenchTable, ReportData
from rankgate.report.failures import FailedTest

TRACEBACK_LINES = 40
"""A failing rank's traceback keeps its last lines, where the error is."""
MAX_FAILURES = 30
"""Failed tests shown in full; the rest are listed by name."""
_BACKTICKS = re.compile(r"`+")


def render_markdown(data: ReportData) -> str:
    title = present.VERDICT_TITLES[data.verdict]
    lines = [f"## rankgate: {title}", "", present.counts_text(data.summary.get("totals") or {}), ""]
    if why := present.incomplete_text(data.incomplete):
        lines += [f"**Incomplete run**: {_inline(why)}. Its results so far are below.", ""]
    # A folder of several in-place runs' files: which run was read, which files left out.
    lines += [f"**Other runs**: {_inline(note)}." for note in data.summary.get("other_runs") or ()]
    lines += [""] if data.summary.get("other_runs") else []
    lines += _table(("machine", ""), present.machine_rows(data.run))
    rows = present.stage_rows(data.stages, data.incomplete)
    if rows:
        lines += ["### Stages", ""]
        lines += _table(
            ("stage", "result", "tests", "time", "reason / note"),
            [(s["stage"], _status(s["status"]), present.stage_tests(s),
              f"{float(s.get('seconds') or 0):.1f} s", present.stage_note(s)) for s in rows],
        )  # fmt: skip
    lines += _benchmarks(data.bench)
    lines += _shards(data.summary.get("groups") or [])
    lines += _failures(data.failures)
    lines += _not_run(data.summary.get("not_run") or [], data.not_run)
    lines += _reasons("Skipped", data.summary.get("skips") or [])
    lines += _reasons("Expected failures (xfailed)", data.summary.get("xfails") or [])
    if data.summary.get("xpassed"):
        lines += ["### Passed unexpectedly (xpassed)", ""]
        lines += [f"- {_code(t)}" for t in data.summary["xpassed"]] + [""]
    if flaky := data.summary.get("flaky"):
        lines += [f"### Flaky tests ({len(flaky)}): failed, then passed a rerun", ""]
        lines += _table(("test", "outcome", "policy", "attempts"),
                        [(_code(t["id"]), t["outcome"], t["policy"], "; ".join(t["attempts"]))
                         for t in flaky])  # fmt: skip
    if quarantined := data.summary.get("quarantined"):
        lines += [f"### Quarantined tests ({len(quarantined)}): failures do not fail the run", ""]
        lines += _table(("test", "outcome", "reason", "issue", "passes in a row"),
                        [(_code(t["id"]), t["outcome"], t["reason"], t["issue"], t["streak"])
                         for t in quarantined])  # fmt: skip
    if stale := data.summary.get("quarantine_stale"):
        lines += [f"### Stale quarantine entries ({len(stale)}): they match no test", ""]
        rows = [(_code(s["entry"]), _code(s["list"]), s["why"]) for s in stale]
        lines += _table(("entry", "list file", "why"), rows)
        lines += ["Remove each from its list, or correct its id.", ""]
    if slowest := data.summary.get("slowest"):
        lines += [f"### Slowest tests ({len(slowest)})", ""]
        lines += _table(("test", "stage", "time", "outcome"),
                        [(_code(t["id"]), t["stage"], f"{t['seconds']:.2f} s", t["outcome"])
                         for t in slowest])  # fmt: skip
    lines += _trend(data)
    plots = " and the plots" if data.plots else ""
    page = Path(data.out_dir) / "report.html"
    lines.append(f"The full report, with every rank's log{plots}: `{page}`.")
    return "\n".join(lines) + "\n"


def _shards(groups: list[dict]) -> list[str]:
    """Where each shard of a sharded run ran, and how its job ended."""
    lines = []
    for g in groups:
        if g.get("shards"):
            lines += [f"### {_code(g['source'])}: {len(g['shards'])} shards", ""]
            lines += [f"- shard {_inline(line)}" for line in g["shards"]] + [""]
    return lines


def _status(status: str) -> str:
    return Markdown(status if status == "passed" else f"**{status.upper()}**")


def _failures(failures: list[FailedTest]) -> list[str]:
    if not failures:
        return []
    lines = [f"### Failed tests ({len(failures)})", ""]
    for test in failures[:MAX_FAILURES]:
        lines += _failure(test)
    if len(failures) > MAX_FAILURES:
        rest = failures[MAX_FAILURES:]
        lines += [f"And {len(rest)} more (the HTML report has them all):", ""]
        lines += [f"- {_code(t.id)} {t.outcome}" for t in rest] + [""]
    return lines


def _not_run(groups: list[dict], tests: list[str]) -> list[str]:
    """Tests that never ran: each reason once, the tests folded."""
    if not tests:
        return []
    lines = [f"### Not run ({len(tests)})", ""]
    lines += [f"- {g['count']} not run: {_inline(g['reason'])}" for g in groups] + [""]
    return lines + _fold(f"the {len(tests)} tests not run", "\n".join(tests))


def _failure(test: FailedTest) -> list[str]:
    stopped = "stopped the run: " if test.stopped_run else ""
    head = f"#### {stopped}{_code(test.id)} {test.outcome}"
    if test.ranks:  # the one rank wording: "rank 1 failed; rank 0 passed"
        head = f"#### {stopped}{_code(test.id)} " + verdict_lines.outcomes_line(
            {r.rank: r.outcome for r in test.ranks}
        )
    lines = [head, ""]
    if test.ranks and (root := test.root_cause) is not None:
        lines += [f"Root cause (likely): **rank {root.rank}** ({root.outcome}).", ""]
    if test.message:
        lines += [_inline(test.message), ""]
    if test.reproduce:
        lines += [_code(test.reproduce), ""]
    texts = [(f"rank {r.rank} {r.outcome}" + (" (Python stacks)" if r.outcome == "hung" else ""),
              r.traceback) for r in test.ranks if r.bad and r.traceback]  # fmt: skip
    if not test.ranks and test.text:
        texts = [("traceback", test.text)]
    for title, text in texts:
        lines += _fold(title, "\n".join(text.strip().splitlines()[-TRACEBACK_LINES:]))
    return lines


def _fold(title: str, text: str) -> list[str]:
    """A folded block: an HTML block, a blank line, a fence, a blank line, its end."""
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"<details><summary>{escape(title)}</summary>", "", f"{fence}text", text,
            fence, "", "</details>", ""]  # fmt: skip


def _reasons(title: str, groups: list[dict]) -> list[str]:
    if not groups:
        return []
    total = sum(g["count"] for g in groups)
    lines = [f"### {title} ({total})", ""]
    return lines + _table(
        ("tests", "reason", "example"),
        [(str(g["count"]), g["reason"], _code(g["examples"][0])) for g in groups],
    )


def _benchmarks(tables: list[BenchTable]) -> list[str]:
    """This run's comparisons in full; the committed results' own check as one line."""
    lines = []
    for table in tables:
        if table.verdicts and not table.committed:
            lines += _comparison(table)
    committed = [t for t in tables if t.verdicts and t.committed]
    if committed:
        verdicts = [v for t in committed for v in t.verdicts]
        counts = ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts))
        bad = [t.title for t in committed if "regressed" in t.verdicts]
        word = f"**{len(bad)} regressed**: {'; '.join(bad)}" if bad else counts
        lines += [
            f"<details><summary>Committed results against their baselines: {len(committed)} "
            f"comparisons, {len(verdicts)} rows: {escape(word)}</summary>",
            "",
            "The full tables are in the HTML report.",
            "",
            "</details>",
            "",
        ]
    return lines


def _comparison(table: BenchTable) -> list[str]:
    verdict = table.verdict
    verdict = f"**{verdict}**" if "regressed" in verdict else verdict
    lines = [f"### Benchmark: {_inline(table.title)}: {verdict}", ""]
    lines += [f"- {_inline(n)}" for n in table.notes] + ([""] if table.notes else [])
    cells = [tuple(Markdown("**regressed**") if c == "regressed" else c for c in row)
             for row in table.rows]  # fmt: skip
    return lines + _table(table.columns, cells)


def _trend(data: ReportData) -> list[str]:
    trend = data.trend
    if trend is None:
        return []
    lines = [f"### Trend over {len(trend.runs)} runs", ""]
    for name, tests in trend.changes.items():
        if tests:
            lines += [f"**{name}** ({len(tests)}): " + ", ".join(_code(t) for t in tests[:20]), ""]
    if not any(trend.changes.values()):
        lines += ["No test changed its outcome since the last run.", ""]
    rows = []
    for name, values in trend.series.items():
        known = [v for v in values if v is not None]
        if len(known) >= 2 and known[-1] != known[-2]:
            rows.append((name, " → ".join(f"{v:g}" for v in known[-5:])))
    if rows:
        lines += _table(("metric that changed", "last runs"), rows)
    return lines


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


class Markdown(str):
    """A table cell that is Markdown already (a code span, bold): kept as it is. Any other
    cell is text from the run (a skip reason, a stage's note, a command line): escaped,
    so ``<img onerror=…>`` in a skip reason is shown, never rendered."""


def _cell(text: str) -> str:
    cell = str(text) if isinstance(text, Markdown) else escape(str(text), quote=False)
    return cell.replace("\n", " ").replace("|", "\\|")


def _inline(text: str) -> str:
    """Plain text in a paragraph: no line breaks, no HTML."""
    return escape(text.replace("\n", " "), quote=False)


def _code(text: str) -> str:
    """An inline code span that holds any backticks ``text`` has."""
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return Markdown(f"{ticks}{pad}{text}{pad}{ticks}")
