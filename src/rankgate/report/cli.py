"""``rankgate report``: the run's results as out/report.html, out/summary.md and JSON.

With no files it reads the output folder (``--out``, default ``out/``): JUnit under
junit/, each stage's outcome under stages/ (or gate.json), benchmark JSON and plots
under bench/ (:mod:`rankgate.report.collect`). It writes ``report.html`` (one
self-contained page, :mod:`rankgate.report.html`) and ``summary.md`` (for
``$GITHUB_STEP_SUMMARY``, :mod:`rankgate.report.markdown`) into that folder, and prints
the JSON summary of :func:`rankgate.report.summary.summarize` on stdout (also to
``-o``), with one human line on stderr. Exit 0 when nothing failed, 1 otherwise,
2 on bad input, as ``merge-junit`` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rankgate.report.collect import collect
from rankgate.report.html import render_html
from rankgate.report.junitfile import OUTCOMES, ReportInputError
from rankgate.report.markdown import render_markdown


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "junit", nargs="*", metavar="JUNIT",
        help="JUnit files; per-rank files (junit.rank<r>.xml) are merged per directory "
        "(default: OUT/junit/)",
    )  # fmt: skip
    parser.add_argument(
        "--bench", action="append", default=[], metavar="FILE",
        help="a benchmark JSON file (or a saved --json run); repeatable (default: OUT/bench/)",
    )  # fmt: skip
    parser.add_argument(
        "--plot", action="append", default=[], metavar="PNG",
        help="a PNG to embed; repeatable (default: OUT/bench/**/*.png)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=Path("out"), metavar="DIR",
        help="the run's output folder; report.html and summary.md are written there (default out)",
    )  # fmt: skip
    parser.add_argument(
        "-o", "--output", metavar="OUT.json", help="also write the JSON summary here"
    )


def run(args: argparse.Namespace) -> int:
    try:
        data = collect(args.out, args.junit, args.bench, args.plot)
        write(data, args.out)
        text = json.dumps(data.summary, indent=2)
        if args.output:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
    except (ReportInputError, OSError) as exc:
        print(f"rankgate report: error: {exc}", file=sys.stderr)
        return 2
    print(text)
    t = data.summary.get("totals") or {}
    counts = ", ".join(f"{t.get(k, 0)} {k}" for k in OUTCOMES)
    print(
        f"rankgate report: {t.get('tests', 0)} tests: {counts}; "
        f"{len(data.summary.get('bench', []))} benchmark files; wrote {args.out / 'report.html'} "
        f"and {args.out / 'summary.md'}",
        file=sys.stderr,
    )
    return 0 if data.ok else 1


def write(data, out_dir: Path) -> tuple[Path, Path]:
    """Write report.html and summary.md into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    html, md = out_dir / "report.html", out_dir / "summary.md"
    html.write_text(render_html(data), encoding="utf-8")
    md.write_text(render_markdown(data), encoding="utf-8")
    return html, md


def write_quietly(out_dir: Path) -> str:
    """After a stage: refresh the report from ``out_dir``; a note on failure, never an error."""
    try:
        html, _ = write(collect(out_dir), out_dir)
    except Exception as exc:  # the stage's verdict stands whatever the report does
        return f"report not written: {type(exc).__name__}: {exc}"
    return f"report: {html}"
