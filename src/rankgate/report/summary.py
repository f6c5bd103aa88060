"""A small JSON summary of JUnit results and benchmark files (``rankgate report``).

:func:`summarize` takes JUnit files and benchmark JSON files. Per-rank JUnit files
(those with a rank in their name or properties) are merged per directory, with the
rules of :mod:`rankgate.report.junit`; any other JUnit file (an ordinary pytest
report, or one written by ``merge-junit``) counts as it is. The result::

    {"ok": false,
     "totals": {"tests": 14, "passed": 11, "failed": 2, "error": 1, "skipped": 0},
     "groups": [{"source": "out/dist", "files": [...], "ranks": [0, 1], "totals": {...}}],
     "failing": [{"id": "...", "outcome": "failed", "source": "out/dist",
                  "failing_ranks": [1], "ranks": {"0": "passed", "1": "failed"},
                  "message": "first line of the message"}],
     "bench": [{"file": "bench.json", "data": [...]}]}

``failing_ranks`` and ``ranks`` are null for a test of a run without ranks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from rankgate.report.failures import split_by_rank
from rankgate.report.junit import merge_files
from rankgate.report.junitfile import (
    OUTCOMES,
    CaseResult,
    JUnitFile,
    ReportInputError,
    expand_paths,
    read_junit,
)

MESSAGE_CHARS = 300
"""A failing test's message is cut to its first line, at most this long."""


def summarize(
    junit_paths: Iterable[str | Path] = (), bench_paths: Iterable[str | Path] = ()
) -> dict:
    """Summarise JUnit and benchmark files; raises :class:`ReportInputError` on bad input."""
    junit_files = [read_junit(p) for p in expand_paths(junit_paths)]
    bench = [{"file": str(p), "data": read_bench(p)} for p in bench_paths]
    if not junit_files and not bench:
        raise ReportInputError("no JUnit or benchmark files given")
    plain, per_rank = split_by_rank(junit_files)
    failing: list[dict] = []
    groups = [_plain_group(f, failing) for f in plain]
    for directory, files in per_rank.items():
        groups.append(_rank_group(directory, files, failing))
    totals = {"tests": 0, **dict.fromkeys(OUTCOMES, 0)}
    for group in groups:
        for key, value in group["totals"].items():
            totals[key] += value
    return {
        "ok": not failing,
        "totals": totals,
        "groups": groups,
        "failing": failing,
        "bench": bench,
    }


def read_bench(path: str | Path) -> object:
    """A benchmark's JSON: the whole file, or its last line (a saved ``--json`` run's output)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportInputError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        return json.loads(lines[-1]) if lines else json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportInputError(
            f"{path}: not JSON, and its last line is not JSON either ({exc})"
        ) from None


def _rank_group(directory: str, files: list[JUnitFile], failing: list[dict]) -> dict:
    report = merge_files(files)
    for test in report.tests:
        if test.verdict in ("failed", "error", "not run"):
            failing.append(
                _failing(
                    test.test_id, test.verdict, directory, test.message,
                    list(test.failing_ranks), test.rank_outcomes,
                )
            )
    return {
        "source": directory,
        "files": list(report.sources),
        "ranks": list(report.ranks),
        "totals": report.counts,
    }


def _plain_group(f: JUnitFile, failing: list[dict]) -> dict:
    by_id: dict[str, CaseResult] = {}
    for case in f.cases:
        prev = by_id.get(case.test_id)
        by_id[case.test_id] = case if prev is None else prev.combine(case)
    totals = {"tests": len(by_id), **dict.fromkeys(OUTCOMES, 0)}
    for test_id, case in by_id.items():
        totals[case.outcome] += 1
        if case.outcome in ("failed", "error", "not run"):
            # A file written by merge-junit says which ranks did what.
            props = dict(case.properties)
            outcomes = {
                int(r): o for r, o in (p.split("=", 1) for p in _split(props.get("rank_outcomes")))
            }
            bad = [int(r) for r in _split(props.get("failing_ranks"))]
            failing.append(
                _failing(
                    test_id, case.outcome, f.path, case.message,
                    bad if outcomes else None, outcomes or None,
                )
            )
    return {"source": f.path, "files": [f.path], "ranks": None, "totals": totals}


def _failing(
    test_id: str, outcome: str, source: str, message: str,
    failing_ranks: list[int] | None, outcomes: dict[int, str] | None,
) -> dict:
    lines = message.strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) > MESSAGE_CHARS:
        first = first[: MESSAGE_CHARS - 1] + "…"
    return {
        "id": test_id,
        "outcome": outcome,
        "source": source,
        "failing_ranks": failing_ranks,
        "ranks": None if outcomes is None else {str(r): o for r, o in outcomes.items()},
        "message": first,
    }


def _split(value: str | None) -> list[str]:
    return [v for v in (value or "").split(",") if v]
