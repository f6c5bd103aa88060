"""The JSON summary of JUnit results and benchmark files (``rankgate report``).

:func:`summarize` takes JUnit files and benchmark JSON files. Per-rank JUnit files
(those with a rank in their name or properties) are merged per directory, with the
rules of :mod:`rankgate.report.junit`; any other JUnit file (an ordinary pytest
report, a pool run's, or one written by ``merge-junit``) counts as it is. Each test
has one of seven outcomes (:mod:`rankgate.report.results`). A failing test that a
signal stopped carries ``"interrupted": true``; a group whose run was interrupted, or
that holds no test, is listed under ``incomplete``. The result::

    {"ok": false,
     "totals": {"tests": 14, "passed": 9, "failed": 2, "error": 1, "skipped": 1,
                "xfailed": 1, "xpassed": 0},
     "groups": [{"source": "out/junit/dist.xml", "files": [...], "ranks": null, "totals": {...}}],
     "failing": [{"id": "...", "outcome": "failed", "source": "out/junit/dist.xml",
                  "failing_ranks": [1], "ranks": {"0": "passed", "1": "failed"},
                  "message": "first line of the message"}],
     "not_run": [{"reason": "not run: rank 1 stopped the run: ...", "count": 4,
                  "examples": ["..."]}],
     "incomplete": [{"source": "out/junit/dist.xml", "why": "received SIGTERM while ..."}],
     "other_runs": ["out/junit/dist holds files of 2 runs: read run ... (the newest); ..."],
     "skips": [{"reason": "world(4/8, ...) needs 4/8 GPUs; 2 visible ...", "count": 13,
                "examples": ["..."]}],
     "xfails": [{"reason": "...", "count": 1, "examples": ["..."]}],
     "xpassed": ["test id", ...],
     "flaky": [{"id": "...", "outcome": "passed", "policy": "pass", "source": "...",
                "attempts": ["attempt 1 failed: rank 1 failed; ...", "attempt 2 passed"]}],
     "quarantined": [{"id": "...", "outcome": "failed", "reason": "...", "issue": "https://...",
                      "streak": "0 of 5", "ready": false, "source": "..."}],
     "quarantine_stale": [{"entry": "t.py::test_gone", "list": "quarantine.toml",
                           "why": "t.py defines no test_gone"}],
     "slowest": [{"id": "...", "seconds": 12.5, "stage": "dist", "outcome": "passed"}],
     "tests": {"test id": "passed", ...},
     "bench": [{"file": "bench.json", "data": [...]}],
     "metrics": {"pool_median_ms world 2 gloo": 4.1}}

``failing_ranks`` and ``ranks`` are null for a test of a run without ranks. A test run
more than once (``--rankgate-reruns``) carries ``attempts`` (one line each) in
``failing``; a flaky one (failed, then passed a rerun) is listed under ``flaky``, whatever
``--rankgate-flaky`` made of it (``outcome``: passed under ``pass``, failed under ``fail``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from rankgate.harness.quarantine import next_streak, read_stale, streak_text
from rankgate.report.junitfile import ReportInputError
from rankgate.report.results import BAD_OUTCOMES, TestResult, count, read_results
from rankgate.report.skips import group_reasons

MESSAGE_CHARS = 300
"""A failing test's message is cut to its first line, at most this long."""
SLOWEST = 15
"""How many of the slowest tests a report lists."""
COMPARE_FORMAT = "rankgate.compare/1"
BASELINE_FORMAT = "rankgate.baseline/1"


def summarize(
    junit_paths: Iterable[str | Path] = (),
    bench_paths: Iterable[str | Path] = (),
    run_id: str | None = None,
) -> dict:
    """Summarise JUnit and benchmark files; raises :class:`ReportInputError` on bad input.
    ``run_id``: of a folder of several in-place runs' files, read that run's (else the
    newest's); no folder holding it is bad input."""
    groups, bench = _read_inputs(list(junit_paths), bench_paths, run_id)
    results = [r for g in groups for r in g.results]
    failing = [_failing(r) for r in results if r.outcome in BAD_OUTCOMES]
    not_run = group_reasons(results, "not run")
    incomplete = [{"source": g.source, "why": why} for g in groups for why in g.incomplete]
    slowest = sorted(results, key=lambda r: -r.seconds)[:SLOWEST]
    return {
        "ok": not failing and not not_run and not incomplete,
        "totals": count(results),
        "groups": [
            {
                "source": g.source,
                "files": g.files,
                "ranks": g.ranks,
                "totals": g.totals,
                **({"shards": g.shards} if g.shards else {}),
            }
            for g in groups
        ],
        "failing": failing,
        "not_run": [g.to_json() for g in not_run],
        "incomplete": incomplete,
        "other_runs": [g.other_runs for g in groups if g.other_runs],
        "skips": [g.to_json() for g in group_reasons(results, "skipped")],
        "xfails": [g.to_json() for g in group_reasons(results, "xfailed")],
        "xpassed": [r.id for r in results if r.outcome == "xpassed"],
        "flaky": [
            {
                "id": r.id,
                "outcome": r.outcome,
                "policy": r.flaky,
                "source": r.source,
                "attempts": [a.line() for a in r.attempts],
            }
            for r in results
            if r.flaky
        ],
        "quarantined": [quarantined(r) for r in results if r.quarantine],
        "quarantine_stale": _stale_entries(groups),
        "slowest": [
            {"id": r.id, "seconds": round(r.seconds, 3), "stage": r.stage, "outcome": r.outcome}
            for r in slowest
            if r.seconds > 0
        ],
        "tests": {r.id: r.outcome for r in results},
        "bench": bench,
        "metrics": bench_metrics(bench),
    }


def _read_inputs(
    junit_paths: list[str | Path], bench_paths: Iterable[str | Path], run_id: str | None
) -> tuple[list, list[dict]]:
    """The JUnit files' groups and the benchmark files' data, read and checked: some input,
    and ``run_id``'s files among it when one is asked for."""
    bench = [{"file": str(p), "data": read_bench(p)} for p in bench_paths]
    groups = read_results(junit_paths, run_id) if junit_paths else []
    if not groups and not bench:
        raise ReportInputError("no JUnit or benchmark files given")
    if run_id is not None and not any(g.run_id == run_id for g in groups):
        held = sorted({g.run_id for g in groups if g.run_id})
        raise ReportInputError(
            f"--run-id {run_id}: no per-rank files of that run here; the runs read: "
            f"{', '.join(held) or 'none with a run id'}"
        )
    return groups, bench


def _failing(r) -> dict:
    """One failing test's entry under ``failing``."""
    return {
        "id": r.id,
        "outcome": r.outcome,
        "source": r.source,
        "failing_ranks": None if r.failing_ranks is None else list(r.failing_ranks),
        "ranks": None if r.ranks is None else {str(k): v for k, v in r.ranks.items()},
        "message": _cut(r.reason),
        **({"interrupted": True} if r.interrupted else {}),
        **({"attempts": [a.line() for a in r.attempts]} if r.attempts else {}),
    }


def _stale_entries(groups) -> list[dict]:
    """Each quarantine entry that matched no test, once ({entry, list, why})."""
    found = {}
    for value in (v for g in groups for v in g.stale_quarantine):
        entry = read_stale(value)
        if entry is not None:
            found.setdefault((entry["entry"], entry["list"]), entry)
    return list(found.values())


QUARANTINE_OUTCOMES = {"xfailed": "failed", "xpassed": "passed", "error": "failed"}
"""A quarantined test runs under an xfail marker: its outcome in plain words."""


def quarantined(r: TestResult) -> dict:
    """A quarantined test's entry: its outcome, why it is listed, its passes in a row."""
    q = r.quarantine
    outcome = "flaky" if r.flaky else QUARANTINE_OUTCOMES.get(r.outcome, r.outcome)
    streak = next_streak(int(q["streak"]), outcome)
    return {
        "id": r.id,
        "outcome": outcome,
        "reason": str(q["reason"]),
        "issue": str(q["issue"]),
        "streak": streak_text(streak, int(q["needed"])),
        "ready": streak >= int(q["needed"]),
        "source": r.source,
        "message": _cut(_failure_line(q.get("failure", ""))),
    }


def _failure_line(text: str) -> str:
    """The line of a failure's text that says what failed: pytest's first ``E`` line, a
    Python traceback's exception line, else its first line."""
    lines = text.splitlines()
    marked = next((ln[1:].strip() for ln in lines if ln.startswith("E   ")), "")
    return marked or _exception_line(text) or next((ln for ln in lines if ln.strip()), "")


def read_bench(path: str | Path) -> object:
    """A benchmark's JSON: the whole file, or its last line (a saved ``--json`` run's output).

    Only shapes a report can show are accepted: a ``bench compare`` comparison, a
    baseline, a benchmark's results (a dict with a ``results`` list), or rows (a list of
    objects, as ``bench harness --json`` prints).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportInputError(f"{path}: cannot read ({exc})") from None
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError as exc:
        docs, error = [], exc
        for line in reversed([line for line in text.splitlines() if line.strip()]):
            try:
                docs.append(json.loads(line))
            except json.JSONDecodeError as exc:
                error = exc
        if not docs:
            raise ReportInputError(f"{path}: not JSON, nor any line of it ({error})") from None
    for data in docs:  # a saved run: its last result line (probe lines may follow it)
        if _known_bench(data):
            return data
    raise ReportInputError(
        f"{path}: not a benchmark result (expected a bench compare --json file, a "
        "baseline, an object with a 'results' list, or a list of row objects)"
    )


def _known_bench(data: object) -> bool:
    if isinstance(data, dict):
        if data.get("format") == COMPARE_FORMAT:
            return isinstance(data.get("comparisons"), list)
        if data.get("format") == BASELINE_FORMAT:
            return True
        rows = data.get("results")
        return isinstance(rows, list) and all(isinstance(r, dict) for r in rows)
    if isinstance(data, list):
        return bool(data) and all(isinstance(r, dict) for r in data)
    return False


def bench_metrics(bench: list[dict]) -> dict[str, float]:
    """Each comparison row's new figure, named ``metric size`` (for the trend)."""
    found: dict[str, float] = {}
    for item in bench:
        data = item["data"]
        if not (isinstance(data, dict) and data.get("format") == COMPARE_FORMAT):
            continue
        for c in data["comparisons"]:
            for row in c.get("rows", []):
                if isinstance(row.get("new"), (int, float)):
                    found[f"{row.get('metric')} {row.get('size')}"] = row["new"]
    return found


def stage_counts(junit: Path) -> dict[str, int]:
    """A stage's test counts by outcome, from its JUnit file or folder of per-rank files.

    {} when it wrote none or wrote one that cannot be read (pytest killed mid-write):
    the executor records what it can, the report names the bad file.
    """
    if not junit.exists():
        return {}
    try:
        groups = read_results([junit])
    except ReportInputError:
        return {}
    return count(r for g in groups for r in g.results)


def stage_flaky(junit: Path) -> list[str]:
    """A stage's flaky tests (failed, then passed a rerun), one line each: ``id — attempt
    1 failed, attempt 2 passed``; [] when its JUnit is missing or unreadable."""
    from rankgate.harness.attempts import attempts_line

    if not junit.exists():
        return []
    try:
        groups = read_results([junit])
    except ReportInputError:
        return []
    return [
        _cut(f"{r.id} — {attempts_line(list(r.attempts))}")
        for g in groups
        for r in g.results
        if r.flaky
    ]


def stage_failures(junit: Path) -> list[str]:
    """A stage's failed tests, one line each: ``id — message``, and for a test on ranks
    the likely root-cause rank's exception line (the message names the ranks).

    [] when its JUnit is missing or unreadable (the stage's reason says what failed then).
    """
    from rankgate.report.failures import failed_tests

    try:
        found = failed_tests([junit]) if junit.exists() else []
    except ReportInputError:
        return []
    lines = []
    for test in found:
        line = f"{test.id} — {test.message or test.outcome}"
        if test.root_cause and (error := _exception_line(test.root_cause.traceback)):
            line += f": {error}"
        lines.append(_cut(line))
    return lines


def _exception_line(traceback: str) -> str:
    """The exception line of a Python traceback (the first unindented line after its
    last frame); "" when there is none (a hung rank's stacks, a crash's signal)."""
    lines = traceback.splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    if not frames:
        return ""
    return next((line for line in lines[frames[-1] + 1 :] if line[:1].strip()), "")


def _cut(message: str) -> str:
    if len(message) > MESSAGE_CHARS:
        return message[: MESSAGE_CHARS - 1] + "…"
    return message
