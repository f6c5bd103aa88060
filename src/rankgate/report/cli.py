"""``rankgate report``: a JSON summary of JUnit and benchmark files.

Prints the summary of :func:`rankgate.report.summary.summarize` on stdout (and writes
it to ``-o``), with one human line on stderr. Exit 0 when no test failed or errored,
1 otherwise, 2 on bad input, as ``merge-junit`` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rankgate.report.junitfile import ReportInputError
from rankgate.report.summary import summarize


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "junit", nargs="*", metavar="JUNIT",
        help="JUnit files; per-rank files (junit.rank<r>.xml) are merged per directory",
    )
    parser.add_argument(
        "--bench", action="append", default=[], metavar="FILE",
        help="a benchmark JSON file (or a saved --json run whose last line is JSON); repeatable",
    )
    parser.add_argument("-o", "--output", metavar="OUT.json", help="also write the summary here")


def run(args: argparse.Namespace) -> int:
    try:
        summary = summarize(args.junit, args.bench)
        text = json.dumps(summary, indent=2)
        if args.output:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
    except (ReportInputError, OSError) as exc:
        print(f"rankgate report: error: {exc}", file=sys.stderr)
        return 2
    print(text)
    t = summary["totals"]
    counts = ", ".join(f"{t[k]} {k}" for k in ("passed", "failed", "error", "skipped"))
    print(
        f"rankgate report: {t['tests']} tests: {counts}; {len(summary['bench'])} benchmark files",
        file=sys.stderr,
    )
    return 0 if summary["ok"] else 1
