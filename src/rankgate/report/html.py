"""``out/report.html``: one self-contained page (inline CSS and SVG, plots as data URIs,
no script, nothing fetched).

From top to bottom: the verdict with every outcome counted apart (and, for a run that
did not finish, what never ran); the machine, commit and command; the stages with
their tests, times and reasons, and a bar per stage; each failed test with its ranks
(the likely root cause first), message, reproduction line, and every rank's traceback,
hang stacks and output folded in ``<details>``; skips and expected failures grouped by
reason; the slowest tests; the totals per JUnit source; the benchmark tables (a
comparison's regressions in red) with their plots; the trend over earlier runs.
"""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path

from rankgate.harness import divergence
from rankgate.report import present, svg
from rankgate.report.collect import BenchTable, Plot, ReportData
from rankgate.report.failures import FailedTest, RankDetail
from rankgate.report.results import OUTCOMES

TEXT_LIMIT = 20_000
"""A traceback or log longer than this keeps its end (where the error is), with a note."""

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2327;
 background:#f6f7f9}
header{padding:18px 28px;color:#fff}
header.v-passed{background:#1e7e34} header.v-failed{background:#b02a37}
header.v-incomplete{background:#6f42c1}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;opacity:.95}
main{padding:8px 28px 40px;max-width:1200px}
h2{margin:26px 0 10px;font-size:18px;border-bottom:1px solid #d0d4d9;padding-bottom:4px}
table{border-collapse:collapse;background:#fff;margin:6px 0 12px}
th,td{border:1px solid #d0d4d9;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef0f3} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
#stages td:first-child,#machine th{white-space:nowrap}
code,.id{font-family:ui-monospace,monospace;font-size:12.5px}
.passed{color:#1e7e34;font-weight:600}
.failed,.error,.regressed,.xpassed{color:#b02a37;font-weight:600}
.skipped,.noisy,.xfailed{color:#8a6d00;font-weight:600} .improved{color:#1e7e34}
.running,.never,.incomplete{color:#6f42c1;font-weight:600}
tr.regressed td{background:#fbe9eb}
.banner{background:#efe7fb;border:1px solid #6f42c1;padding:8px 12px;margin:14px 0}
.tiles{display:flex;gap:8px;flex-wrap:wrap;margin:12px 0}
.tile{background:#fff;border:1px solid #d0d4d9;border-top:4px solid #d0d4d9;padding:6px 14px;
 min-width:76px} .tile b{display:block;font-size:22px}
.tile.passed{border-top-color:#1e7e34}
.tile.failed,.tile.error,.tile.not-run,.tile.xpassed{border-top-color:#b02a37}
.tile.skipped,.tile.xfailed{border-top-color:#c69500} .tile.zero{opacity:.55}
article.test{background:#fff;border:1px solid #d0d4d9;border-left:5px solid #b02a37;
 padding:10px 14px;margin:12px 0}
article.test h3{margin:0 0 6px;font-size:15px;font-family:ui-monospace,monospace}
.rank{display:inline-block;border-radius:10px;padding:0 8px;margin-right:4px;font-size:12px;
 font-family:ui-monospace,monospace}
.rank.bad{background:#b02a37;color:#fff} .rank.good{background:#d4edda;color:#1e4620}
.rank.other{background:#fff3cd;color:#6b5200} .rank.root{outline:2px solid #1d2327}
pre{background:#f3f4f6;border:1px solid #e1e4e8;padding:8px;overflow-x:auto;font-size:12px;
 white-space:pre-wrap;word-break:break-word;margin:6px 0}
pre.reproduce{background:#1d2327;color:#e6edf3}
details{margin:4px 0} summary{cursor:pointer;font-weight:600}
figure{background:#fff;border:1px solid #d0d4d9;padding:8px;margin:10px 0;display:inline-block}
figure img{max-width:100%} figcaption{font-size:12px;color:#555}
svg text{fill:#1d2327} .trends{display:flex;flex-wrap:wrap;gap:10px}
svg.trend{background:#fff;border:1px solid #d0d4d9}
.note{color:#555;font-size:13px}
"""


def render_html(data: ReportData) -> str:
    """The whole page."""
    title = present.VERDICT_TITLES[data.verdict]
    counts = present.counts_text(data.summary.get("totals") or {})
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>rankgate report — {title}</title><style>{_CSS}</style></head><body>",
        f'<header class="v-{data.verdict}" id="verdict"><h1>rankgate: {title}</h1>',
        f"<p>{escape(counts)} · {len(data.stages)} stages · generated {escape(data.generated)}"
        "</p></header><main>",
        _incomplete(data.incomplete),
        _other_runs(data.summary.get("other_runs") or []),
        _tiles(data.summary.get("totals") or {}),
        _machine(data.run),
        _stages(present.stage_rows(data.stages, data.incomplete)),
        _failures(data.failures),
        _not_run(data.summary.get("not_run") or [], data.not_run),
        _reasons("skips", "Skipped", data.summary.get("skips") or []),
        _reasons("xfails", "Expected failures (xfailed)", data.summary.get("xfails") or []),
        _xpassed(data.summary.get("xpassed") or []),
        _flaky(data.summary.get("flaky") or []),
        _quarantined(data.summary.get("quarantined") or []),
        _stale_quarantine(data.summary.get("quarantine_stale") or []),
        _slowest(data.summary.get("slowest") or []),
        _groups(data.summary.get("groups") or []),
        _bench(data.bench, data.plots),
        _trend(data),
        "</main></body></html>",
    ]
    return "\n".join(p for p in parts if p)


def _incomplete(incomplete: dict[str, list[str]]) -> str:
    why = present.incomplete_text(incomplete)
    if not why:
        return ""
    return (
        f'<p class="banner" id="incomplete"><b>Incomplete run</b>: {escape(why)}. '
        "What it did before it stopped is below; it is not a pass.</p>"
    )


def _other_runs(notes: list[str]) -> str:
    """A folder of several in-place runs' files: which run was read, which files left out."""
    if not notes:
        return ""
    items = "".join(f"<li>{escape(note)}</li>" for note in notes)
    return f'<section id="other-runs" class="note"><b>Other runs</b><ul>{items}</ul></section>'


def _tiles(totals: dict) -> str:
    tiles = "".join(
        f'<div class="tile {k.replace(" ", "-")}{" zero" if not totals.get(k) else ""}" '
        f'data-outcome="{k}">'
        f"<b>{totals.get(k, 0)}</b>{k}</div>"
        for k in OUTCOMES
    )
    return f'<section id="outcomes" class="tiles">{tiles}</section>'


def _machine(run: dict | None) -> str:
    rows = "".join(
        f'<tr data-key="{escape(k)}"><th>{escape(k)}</th><td>{escape(v)}</td></tr>'
        for k, v in present.machine_rows(run)
    )
    return f'<section id="machine"><h2>Machine</h2><table>{rows}</table></section>'


def _stages(stages: list[dict]) -> str:
    if not stages:
        return ""
    rows = []
    for s in stages:
        status = s["status"]
        rows.append(
            f'<tr data-stage="{escape(s["stage"])}"><td>{escape(s["stage"])}</td>'
            f'<td class="{escape(status.split()[0])}">{escape(status)}</td>'
            f"<td>{escape(present.stage_tests(s))}</td>"
            f'<td class="num">{float(s.get("seconds") or 0):.1f} s</td>'
            f"<td>{escape(present.stage_note(s))}</td></tr>"
        )
    table = (
        "<table><tr><th>stage</th><th>result</th><th>tests</th><th>time</th>"
        "<th>reason / note</th></tr>" + "".join(rows) + "</table>"
    )
    bars = svg.stage_bars([s for s in stages if s["status"] != "never ran"])
    return (
        f'<section id="stages"><h2>Stages</h2>{table}</section>'
        f'<section id="time"><h2>Time per stage</h2>{bars}</section>'
    )


def _failures(failures: list[FailedTest]) -> str:
    if not failures:
        return '<section id="failures"><h2>Failed tests</h2><p class="passed">none</p></section>'
    return (
        f'<section id="failures"><h2>Failed tests ({len(failures)})</h2>'
        + "".join(_failure(t) for t in failures)
        + "</section>"
    )


def _not_run(groups: list[dict], tests: list[str]) -> str:
    """Tests that never ran: each reason once, the tests folded."""
    if not tests:
        return ""
    reasons = "".join(
        f"<li><b>{g['count']}</b> not run: {escape(g['reason'])}</li>" for g in groups
    )
    listed = "".join(f"<li>{escape(t)}</li>" for t in tests)
    return (
        f'<section id="not-run"><h2>Not run ({len(tests)})</h2><ul>{reasons}</ul>'
        f"<details><summary>the {len(tests)} tests not run</summary><ul>{listed}</ul>"
        "</details></section>"
    )


def _failure(test: FailedTest) -> str:
    stopped = "stopped the run: " if test.stopped_run else ""
    parts = [
        f'<article class="test" data-test="{escape(test.id)}">',
        f"<h3>{stopped}{escape(test.id)} "
        f'<span class="{escape(test.outcome)}">{escape(test.outcome)}</span></h3>',
    ]
    root = test.root_cause
    if test.ranks:
        badges = "".join(_badge(r, r is root) for r in test.ranks)
        failing = ", ".join(map(str, test.failing_ranks)) or "none"
        parts.append(
            f'<p class="ranks">failing ranks: <b>{escape(failing)}</b> &nbsp; {badges}</p>'
        )
    if root is not None:
        parts.append(
            f'<p class="root-cause">root cause (likely): <b>rank {root.rank}</b> '
            f"({escape(root.outcome)}); its report comes first</p>"
        )
    if test.hung:
        ranks = ", ".join(map(str, test.hung))
        parts.append(
            f'<p class="hang">hang: rank{"s" * (len(test.hung) > 1)} {ranks} did not finish; '
            "each one's Python stacks are in its fold below</p>"
        )
    if test.message:
        parts.append(f'<p class="message">{escape(test.message)}</p>')
    if test.reproduce:
        parts.append(f'<pre class="reproduce">{escape(test.reproduce)}</pre>')
    ledgers = divergence.table_in(test.text)
    if ledgers:  # the ranks' collectives side by side where they part
        parts.append(f'<pre class="ledgers">{escape(ledgers)}</pre>')
    for rank in test.ranks:
        if rank.bad or rank.stdout or rank.stderr:
            parts.append(_rank_details(rank))
    if not test.ranks:
        parts.append(
            _details("traceback", test.text, {"stdout": test.stdout, "stderr": test.stderr})
        )
    parts.append(f'<p class="note">from {escape(test.source)}</p></article>')
    return "".join(parts)


def _badge(rank: RankDetail, root: bool) -> str:
    kind = "bad" if rank.bad else ("good" if rank.outcome == "passed" else "other")
    return (
        f'<span class="rank {kind}{" root" * root}" data-rank="{rank.rank}">'
        f"rank {rank.rank}: {escape(rank.outcome)}</span>"
    )


def _rank_details(rank: RankDetail) -> str:
    what = {"hung": "Python stacks and log", "passed": "log"}.get(rank.outcome, "")
    what = what or ("traceback and log" if rank.bad else "log")
    return _details(
        f"rank {rank.rank}: {rank.outcome} — {what}", rank.traceback,
        {"stdout": rank.stdout, "stderr": rank.stderr}, rank.rank,
    )  # fmt: skip


def _details(title: str, traceback: str, logs: dict[str, str], rank: int | None = None) -> str:
    attr = f' data-rank="{rank}"' if rank is not None else ""
    body = []
    if traceback:
        body.append(f'<pre class="traceback">{escape(_tail(traceback))}</pre>')
    for name, text in logs.items():
        if text:
            body.append(
                f'<p class="note">{name}</p><pre class="log {name}">{escape(_tail(text))}</pre>'
            )
    if not body:
        body.append('<p class="note">no output</p>')
    summary = f"<summary>{escape(title)}</summary>"
    return f'<details class="rank-log"{attr}>{summary}{"".join(body)}</details>'


def _reasons(section: str, title: str, groups: list[dict]) -> str:
    if not groups:
        return ""
    total = sum(g["count"] for g in groups)
    rows = "".join(
        f'<tr><td class="num">{g["count"]}</td><td>{escape(g["reason"])}</td>'
        f'<td class="id">{escape(g["examples"][0])}'
        + (f" (+{g['count'] - 1} more)" if g["count"] > 1 else "")
        + "</td></tr>"
        for g in groups
    )
    return (
        f'<section id="{section}"><h2>{title} ({total})</h2><table><tr><th>tests</th>'
        f"<th>reason</th><th>example</th></tr>{rows}</table></section>"
    )


def _xpassed(tests: list[str]) -> str:
    if not tests:
        return ""
    items = "".join(f'<li class="id">{escape(t)}</li>' for t in tests)
    return (
        f'<section id="xpassed"><h2>Passed unexpectedly (xpassed: {len(tests)})</h2>'
        f'<p class="note">marked xfail, yet they pass: drop the mark, or make it strict</p>'
        f"<ul>{items}</ul></section>"
    )


def _flaky(tests: list[dict]) -> str:
    """Tests that failed, then passed a rerun, with every attempt."""
    if not tests:
        return ""
    rows = "".join(
        f'<tr><td class="id">{escape(t["id"])}</td>'
        f'<td class="{escape(t["outcome"])}">{escape(t["outcome"])}</td>'
        f"<td>{escape(t['policy'])}</td>"
        f"<td>{'<br>'.join(escape(a) for a in t['attempts'])}</td></tr>"
        for t in tests
    )
    return (
        f'<section id="flaky"><h2>Flaky tests ({len(tests)})</h2>'
        '<p class="note">failed, then passed a rerun on a fresh world (--rankgate-reruns); '
        "--rankgate-flaky=pass counts them as passed, fail as failed</p>"
        "<table><tr><th>test</th><th>outcome</th><th>policy</th><th>attempts</th></tr>"
        f"{rows}</table></section>"
    )


def _quarantined(tests: list[dict]) -> str:
    """Quarantined tests: their outcome, why they are quarantined, and whether they may
    leave the list."""
    if not tests:
        return ""
    rows = "".join(
        f'<tr><td class="id">{escape(t["id"])}</td>'
        f'<td class="{escape(t["outcome"])}">{escape(t["outcome"])}'
        + (f'<br><span class="note">{escape(t["message"])}</span>' if t.get("message") else "")
        + f"</td><td>{escape(t['reason'])}</td><td>{escape(t['issue'])}</td>"
        f"<td>{escape(t['streak'])}</td></tr>"
        for t in tests
    )
    return (
        f'<section id="quarantined"><h2>Quarantined tests ({len(tests)})</h2>'
        '<p class="note">they ran; their failures do not fail the run (--rankgate-quarantine)'
        "</p><table><tr><th>test</th><th>outcome</th><th>reason</th><th>issue</th>"
        f"<th>passes in a row</th></tr>{rows}</table></section>"
    )


def _stale_quarantine(entries: list[dict]) -> str:
    """Quarantine entries that match no test: each with its list file and why."""
    if not entries:
        return ""
    rows = "".join(
        f'<tr><td class="id">{escape(e["entry"])}</td><td>{escape(e["list"])}</td>'
        f"<td>{escape(e['why'])}</td></tr>"
        for e in entries
    )
    return (
        f'<section id="quarantine-stale"><h2>Stale quarantine entries ({len(entries)})</h2>'
        '<p class="note">they match no test: remove each from its list, or correct its id'
        "</p><table><tr><th>entry</th><th>list file</th><th>why</th></tr>"
        f"{rows}</table></section>"
    )


def _slowest(slowest: list[dict]) -> str:
    if not slowest:
        return ""
    rows = "".join(
        f'<tr><td class="num">{i}</td><td class="id">{escape(t["id"])}</td>'
        f'<td>{escape(t["stage"])}</td><td class="num">{t["seconds"]:.2f} s</td>'
        f'<td class="{escape(t["outcome"])}">{escape(t["outcome"])}</td></tr>'
        for i, t in enumerate(slowest, start=1)
    )
    return (
        f'<section id="slowest"><h2>Slowest tests ({len(slowest)})</h2><table><tr><th>#</th>'
        f"<th>test</th><th>stage</th><th>time</th><th>outcome</th></tr>{rows}</table></section>"
    )


def _groups(groups: list[dict]) -> str:
    if not groups:
        return ""
    keys = ("tests", *OUTCOMES)
    head = "<th>source</th>" + "".join(f"<th>{k}</th>" for k in keys)
    rows = "".join(
        f"<tr><td>{escape(g['source'])}</td>"
        + "".join(f'<td class="num">{g["totals"].get(k, 0)}</td>' for k in keys)
        + "</tr>"
        for g in groups
    )
    table = f"<table><tr>{head}</tr>{rows}</table>"
    shards = "".join(
        f"<p>{escape(g['source'])} ran in {len(g['shards'])} shards:</p><ul>"
        + "".join(f"<li>shard {escape(line)}</li>" for line in g["shards"])
        + "</ul>"
        for g in groups
        if g.get("shards")
    )
    return f'<section id="tests"><h2>Test results per source</h2>{table}{shards}</section>'


def _bench(tables: list[BenchTable], plots: list[Plot]) -> str:
    placed: set[str] = set()
    parts = []
    tables = sorted(tables, key=lambda t: t.committed)  # this run's first (a stable sort)
    for i, table in enumerate(tables):
        parts.append(_bench_table(table))
        last_of_file = i + 1 == len(tables) or tables[i + 1].source != table.source
        if last_of_file and table.source:
            for plot in plots:
                if Path(plot.name).stem == Path(table.source).stem and plot.name not in placed:
                    parts.append(_figure(plot))
                    placed.add(plot.name)
    rest = [_figure(p) for p in plots if p.name not in placed]
    html = ""
    if parts:
        html += '<section id="bench"><h2>Benchmarks</h2>' + "".join(parts) + "</section>"
    if rest:
        html += '<section id="plots"><h2>Plots</h2>' + "".join(rest) + "</section>"
    return html


def _bench_table(table: BenchTable) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    rows = []
    for i, row in enumerate(table.rows):
        verdict = table.verdicts[i] if i < len(table.verdicts) else ""
        cells = "".join(
            f'<td class="{escape(cell) if c == "verdict" else _align(cell)}">{escape(cell)}</td>'
            for c, cell in zip(table.columns, row)
        )
        rows.append(f'<tr class="{escape(verdict)}">{cells}</tr>')
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in table.notes)
    if table.verdicts:
        verdict = table.verdict
        css = "regressed" if "regressed" in verdict else "passed"
        notes = f'<p class="{css}">{escape(verdict)}</p>' + notes
    html = f"<h3>{escape(table.title)}</h3>{notes}<table><tr>{head}</tr>{''.join(rows)}</table>"
    if table.committed:  # the repository's own check, folded: this run's tables lead
        return (
            f'<details class="committed"><summary>committed results: {escape(table.title)}: '
            f"{escape(table.verdict)}</summary>{html}</details>"
        )
    return html


def _figure(plot: Plot) -> str:
    uri = "data:image/png;base64," + base64.b64encode(plot.png).decode("ascii")
    return (
        f'<figure><img src="{uri}" alt="{escape(plot.name)}">'
        f"<figcaption>{escape(plot.name)}</figcaption></figure>"
    )


def _align(cell: str) -> str:
    """Numbers right-aligned, words left."""
    try:
        float(cell.rstrip("%"))
    except ValueError:
        return "text"
    return "num"


def _trend(data: ReportData) -> str:
    trend = data.trend
    if trend is None:
        return ""
    lists = []
    for name, tests in trend.changes.items():
        items = "".join(f'<li class="id">{escape(t)}</li>' for t in tests)
        lists.append(
            f'<div data-change="{escape(name)}"><h3>{escape(name)} ({len(tests)})</h3>'
            + (f"<ul>{items}</ul>" if tests else '<p class="note">none</p>')
            + "</div>"
        )
    # A metric this run alone has (a new benchmark) has no trend yet.
    lines = "".join(
        svg.trend_line(k, v, trend.runs)
        for k, v in trend.series.items()
        if sum(x is not None for x in v) >= 2
    )
    return (
        f'<section id="trend"><h2>Trend over {len(trend.runs)} runs</h2>'
        f'<p class="note">since the last run ({escape(trend.runs[-2])}):</p>{"".join(lists)}'
        f'<div class="trends">{lines}</div></section>'
    )


def _tail(text: str) -> str:
    if len(text) <= TEXT_LIMIT:
        return text
    return f"[… {len(text) - TEXT_LIMIT} earlier characters left out]\n" + text[-TEXT_LIMIT:]
