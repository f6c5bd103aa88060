"""``rankgate report``: the run's results as out/report.html, out/summary.md and JSON.

With no files it reads the output folder (``--out``, default ``out/``): run.json, JUnit
under junit/, each stage's outcome under stages/ (or gate.json), benchmark JSON and
plots under bench/ (:mod:`rankgate.report.collect`); ``--history DIR`` (default
OUT/history/ when it exists) adds the trend over earlier runs' report.json. It writes
``report.html`` (one self-contained page, :mod:`rankgate.report.html`), ``summary.md``
(GitHub-flavoured Markdown, :mod:`rankgate.report.markdown`) and ``report.json`` into
that folder, appends summary.md to ``$GITHUB_STEP_SUMMARY`` when that is set, and
prints its verdict line; with ``--json`` it prints the JSON on stdout and the verdict
line on stderr (``-o`` writes the JSON to a file either way). Exit 0 when
the run passed, 1 when something failed or the run is incomplete, 2 on bad input (a
one-line error).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rankgate.cliargs import existing_file, png_file
from rankgate.harness import verdict_lines
from rankgate.report.collect import ReportData, collect
from rankgate.report.html import render_html
from rankgate.report.junitfile import ReportInputError
from rankgate.report.markdown import render_markdown
from rankgate.report.results import OUTCOMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "junit", nargs="*", metavar="JUNIT",
        help="JUnit files; per-rank files (junit.rank<r>.xml) are merged per directory "
        "(default: OUT/junit/)",
    )  # fmt: skip
    parser.add_argument(
        "--bench", action="append", default=[], metavar="FILE", type=existing_file,
        help="a benchmark JSON file (or a saved --json run); repeatable (default: OUT/bench/)",
    )  # fmt: skip
    parser.add_argument(
        "--plot", action="append", default=[], metavar="PNG", type=png_file,
        help="a PNG to embed; repeatable (default: OUT/bench/**/*.png)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=Path("out"), metavar="DIR",
        help="the run's output folder; report.html and summary.md are written there (default out)",
    )  # fmt: skip
    parser.add_argument(
        "--history", type=Path, metavar="DIR",
        help="a folder of earlier runs' report.json: a trend per metric, and the tests "
        "whose outcome changed since the last of them (default: OUT/history, when it exists)",
    )  # fmt: skip
    parser.add_argument(
        "--run-id", metavar="ID",
        help="of a folder holding several in-place runs' per-rank files, read run ID's "
        "(default: each folder's newest run)",
    )  # fmt: skip
    parser.add_argument(
        "-o", "--output", metavar="OUT.json",
        help="also write the JSON summary here (default: only OUT/report.json)",
    )
    parser.add_argument(
        "--json", action="store_true",
        help="print the JSON summary on stdout (the verdict line goes to stderr then)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    try:
        history = args.history or default_history(args.out)
        data = collect(args.out, args.junit, args.bench, args.plot, history, args.run_id)
        write(data, args.out)
        text = json.dumps(data.summary, indent=2)
        if args.output:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
        if step_summary := os.environ.get("GITHUB_STEP_SUMMARY"):
            with open(step_summary, "a", encoding="utf-8") as f:
                f.write(render_markdown(data))
    except (ReportInputError, OSError) as exc:
        print(f"rankgate report: error: {exc}", file=sys.stderr)
        return 2
    line = (
        f"rankgate report: {headline(data)}; wrote {args.out / 'report.html'} and "
        f"{args.out / 'summary.md'}"
    )
    notes = [f"rankgate report: {note}" for note in data.summary.get("other_runs") or ()]
    if args.json:
        print(text)
        print("\n".join([*notes, line]), file=sys.stderr)
    else:
        print("\n".join([*notes, line]))
    return 0 if data.ok else 1


def headline(data: ReportData) -> str:
    """``FAILED: 12 tests: 9 passed, 2 failed, ...; 3 benchmark files``."""
    t = data.summary.get("totals") or {}
    counts = ", ".join(f"{t.get(k, 0)} {k}" for k in OUTCOMES)
    line = f"{data.verdict.upper()}: {verdict_lines.count(t.get('tests', 0), 'test')}: {counts}"
    if flaky := data.summary.get("flaky"):
        line += f"; {len(flaky)} flaky"
    if quarantined := data.summary.get("quarantined"):
        line += f"; {len(quarantined)} quarantined"
    return line + f"; {len(data.summary.get('bench', []))} benchmark files"


def default_history(out_dir: Path) -> Path | None:
    """OUT/history/, when it exists: earlier runs' report.json kept beside this run's."""
    folder = out_dir / "history"
    return folder if folder.is_dir() else None


def write(data: ReportData, out_dir: Path) -> tuple[Path, Path]:
    """Write report.html, summary.md and report.json into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    html, md = out_dir / "report.html", out_dir / "summary.md"
    html.write_text(render_html(data), encoding="utf-8")
    md.write_text(render_markdown(data), encoding="utf-8")
    (out_dir / "report.json").write_text(json.dumps(data.summary, indent=2) + "\n")
    return html, md


def write_quietly(out_dir: Path) -> str:
    """After a stage: refresh the report from ``out_dir``; a note on failure, never an error."""
    try:
        html, _ = write(collect(out_dir, history_dir=default_history(out_dir)), out_dir)
    except Exception as exc:  # the stage's verdict stands whatever the report does
        return f"report not written: {type(exc).__name__}: {exc}"
    return f"report: {html}"
