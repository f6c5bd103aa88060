"""``out/report.html``: one self-contained page (inline CSS, plots as data URIs, no script).

From top to bottom: the verdict; the stages with pass/fail/skip and their reasons; each
failed test with its failing ranks, message and reproduction line, and every rank's
traceback and output folded in ``<details>``; the test totals per source; the benchmark
tables (a comparison's regressions in red); the plots.
"""

from __future__ import annotations

import base64
from html import escape

from rankgate.report.collect import BenchTable, ReportData
from rankgate.report.failures import FailedTest, RankDetail

TEXT_LIMIT = 20_000
"""A traceback or log longer than this keeps its end (where the error is), with a note."""

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2327;
 background:#f6f7f9}
header{padding:18px 28px;color:#fff}
header.ok{background:#1e7e34} header.bad{background:#b02a37}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;opacity:.9}
main{padding:8px 28px 40px;max-width:1200px}
h2{margin:26px 0 10px;font-size:18px;border-bottom:1px solid #d0d4d9;padding-bottom:4px}
table{border-collapse:collapse;background:#fff;margin:6px 0 12px}
th,td{border:1px solid #d0d4d9;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef0f3} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
#stages td:first-child{white-space:nowrap}
.passed{color:#1e7e34;font-weight:600} .failed,.error,.regressed{color:#b02a37;font-weight:600}
.skipped,.noisy{color:#8a6d00;font-weight:600} .improved{color:#1e7e34}
tr.regressed td{background:#fbe9eb}
article.test{background:#fff;border:1px solid #d0d4d9;border-left:5px solid #b02a37;
 padding:10px 14px;margin:12px 0}
article.test h3{margin:0 0 6px;font-size:15px;font-family:ui-monospace,monospace}
.rank{display:inline-block;border-radius:10px;padding:0 8px;margin-right:4px;font-size:12px;
 font-family:ui-monospace,monospace}
.rank.bad{background:#b02a37;color:#fff} .rank.good{background:#d4edda;color:#1e4620}
.rank.other{background:#fff3cd;color:#6b5200}
pre{background:#f3f4f6;border:1px solid #e1e4e8;padding:8px;overflow-x:auto;font-size:12px;
 white-space:pre-wrap;word-break:break-word;margin:6px 0}
pre.reproduce{background:#1d2327;color:#e6edf3}
details{margin:4px 0} summary{cursor:pointer;font-weight:600}
figure{background:#fff;border:1px solid #d0d4d9;padding:8px;margin:10px 0;display:inline-block}
figure img{max-width:100%} figcaption{font-size:12px;color:#555}
.note{color:#555;font-size:13px}
"""


def render_html(data: ReportData) -> str:
    """The whole page."""
    totals = data.summary.get("totals") or {}
    verdict = "passed" if data.ok else "FAILED"
    counts = ", ".join(
        f"{totals[k]} {k}" for k in ("passed", "failed", "error", "skipped") if k in totals
    )
    subtitle = f"{totals.get('tests', 0)} tests: {counts}" if totals else "no test results"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>rankgate report — {verdict}</title><style>{_CSS}</style></head><body>",
        f'<header class="{"ok" if data.ok else "bad"}" id="verdict"><h1>rankgate: {verdict}</h1>',
        f"<p>{escape(subtitle)} · {len(data.stages)} stages · "
        f"generated {escape(data.generated)}</p>",
        "</header><main>",
        _stages(data.stages),
        _failures(data.failures),
        _groups(data.summary.get("groups") or []),
        _bench(data.bench),
        _plots(data),
        "</main></body></html>",
    ]
    return "\n".join(p for p in parts if p)


def _stages(stages: list[dict]) -> str:
    if not stages:
        return ""
    rows = []
    for s in stages:
        why = s.get("reason") or ""
        selected = s.get("selected") or ""
        if selected and selected != why:
            why = "; ".join(filter(None, (why, f"ran: {selected}")))
        rows.append(
            f'<tr data-stage="{escape(s["stage"])}"><td>{escape(s["stage"])}</td>'
            f'<td class="{escape(s["status"])}">{escape(s["status"])}</td>'
            f'<td class="num">{float(s.get("seconds") or 0):.1f} s</td><td>{escape(why)}</td></tr>'
        )
    return (
        '<section id="stages"><h2>Stages</h2><table><tr><th>stage</th><th>result</th>'
        "<th>time</th><th>reason / note</th></tr>" + "".join(rows) + "</table></section>"
    )


def _failures(failures: list[FailedTest]) -> str:
    if not failures:
        return '<section id="failures"><h2>Failed tests</h2><p class="passed">none</p></section>'
    return (
        f'<section id="failures"><h2>Failed tests ({len(failures)})</h2>'
        + "".join(_failure(t) for t in failures)
        + "</section>"
    )


def _failure(test: FailedTest) -> str:
    parts = [
        f'<article class="test" data-test="{escape(test.id)}">',
        f"<h3>{escape(test.id)} "
        f'<span class="{escape(test.outcome)}">{escape(test.outcome)}</span></h3>',
    ]
    if test.ranks:
        badges = "".join(_badge(r) for r in test.ranks)
        failing = ", ".join(map(str, test.failing_ranks)) or "none"
        parts.append(
            f'<p class="ranks">failing ranks: <b>{escape(failing)}</b> &nbsp; {badges}</p>'
        )
    if test.message:
        parts.append(f'<p class="message">{escape(test.message)}</p>')
    if test.reproduce:
        parts.append(f'<pre class="reproduce">{escape(test.reproduce)}</pre>')
    for rank in test.ranks:
        if rank.bad or rank.stdout or rank.stderr:
            parts.append(_rank_details(rank))
    if not test.ranks:
        parts.append(
            _details("traceback", test.text, {"stdout": test.stdout, "stderr": test.stderr})
        )
    parts.append(f'<p class="note">from {escape(test.source)}</p></article>')
    return "".join(parts)


def _badge(rank: RankDetail) -> str:
    kind = "bad" if rank.bad else ("good" if rank.outcome == "passed" else "other")
    return (
        f'<span class="rank {kind}" data-rank="{rank.rank}">'
        f"rank {rank.rank}: {escape(rank.outcome)}</span>"
    )


def _rank_details(rank: RankDetail) -> str:
    title = f"rank {rank.rank}: {rank.outcome}" + (" — traceback and log" if rank.bad else " — log")
    return _details(
        title, rank.traceback, {"stdout": rank.stdout, "stderr": rank.stderr}, rank.rank
    )


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


def _groups(groups: list[dict]) -> str:
    if not groups:
        return ""
    head = "".join(
        f"<th>{k}</th>" for k in ("source", "tests", "passed", "failed", "error", "skipped")
    )
    rows = []
    for g in groups:
        t = g["totals"]
        cells = "".join(
            f'<td class="num">{t.get(k, 0)}</td>'
            for k in ("tests", "passed", "failed", "error", "skipped")
        )
        rows.append(f"<tr><td>{escape(g['source'])}</td>{cells}</tr>")
    table = f"<table><tr>{head}</tr>{''.join(rows)}</table>"
    return f'<section id="tests"><h2>Test results</h2>{table}</section>'


def _bench(tables: list[BenchTable]) -> str:
    if not tables:
        return ""
    return (
        '<section id="bench"><h2>Benchmarks</h2>'
        + "".join(_bench_table(t) for t in tables)
        + "</section>"
    )


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
    return f"<h3>{escape(table.title)}</h3>{notes}<table><tr>{head}</tr>{''.join(rows)}</table>"


def _align(cell: str) -> str:
    """Numbers right-aligned, words left."""
    try:
        float(cell.rstrip("%"))
    except ValueError:
        return "text"
    return "num"


def _plots(data: ReportData) -> str:
    if not data.plots:
        return ""
    figures = []
    for plot in data.plots:
        uri = "data:image/png;base64," + base64.b64encode(plot.png).decode("ascii")
        figures.append(
            f'<figure><img src="{uri}" alt="{escape(plot.name)}">'
            f"<figcaption>{escape(plot.name)}</figcaption></figure>"
        )
    return '<section id="plots"><h2>Plots</h2>' + "".join(figures) + "</section>"


def _tail(text: str) -> str:
    if len(text) <= TEXT_LIMIT:
        return text
    return f"[… {len(text) - TEXT_LIMIT} earlier characters left out]\n" + text[-TEXT_LIMIT:]
