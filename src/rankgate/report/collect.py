"""Everything one report shows, gathered from a run's output folder (``out/``).

:func:`collect` reads, under the output folder unless given explicitly:

- ``run.json`` (the machine, commit, command and planned stages, :mod:`rankgate.report.runinfo`),
- ``junit/*.xml`` and per-rank ``junit.rank<r>.xml`` files (the test results),
- ``stages/*.json`` (each stage's outcome, written by the executor) or ``gate.json``,
- ``bench/*.json`` (benchmark results, ``bench compare`` comparisons),
- ``bench/**/*.png`` (plots, embedded in the HTML),
- earlier runs' report JSON (``--history DIR``) for the trend.

A stage file or gate table that is not what the executor writes, or a status outside
:data:`STATUSES`, is a :class:`ReportInputError` naming the file. The HTML and Markdown
renderers take the :class:`ReportData` it returns; its ``summary`` is the JSON
``rankgate report`` prints and writes to ``out/report.json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rankgate.proc.contention import PROBE_KEY
from rankgate.report import history, rankresults, runinfo
from rankgate.report.failures import FailedTest, failed_tests, stopper_first
from rankgate.report.json_summary import summarize
from rankgate.report.junitfile import NO_TEST, ReportInputError
from rankgate.report.results import count

STAGE_ORDER = ("env-check", "lint", "unit", "dist", "gpu", "hpc", "bench", "container")
STATUSES = ("passed", "failed", "incomplete", "skipped", runinfo.RUNNING)
"""A stage file's statuses; ``running`` is the marker of a stage that has not ended."""


@dataclass(frozen=True, slots=True)
class BenchTable:
    """One benchmark file as a table."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    verdicts: tuple[str, ...] = ()
    """Per row, for comparisons: regressed, improved, same, noisy ... ("" otherwise)."""
    notes: tuple[str, ...] = ()
    source: str = ""
    """The file it came from (a plot with the same stem is shown beside it)."""
    committed: bool = False
    """A comparison of committed results with their baselines (``bench compare
    --committed``): a check of the repository, not of this run."""

    @property
    def verdict(self) -> str:
        """A comparison's one word: regressed, inconclusive or no regression."""
        if "regressed" in self.verdicts:
            return f"{self.verdicts.count('regressed')} regressed"
        if "inconclusive" in self.verdicts:
            unsure = self.verdicts.count("inconclusive")
            return f"inconclusive ({unsure} within the baseline's spread)"
        return "no regression"


@dataclass(frozen=True, slots=True)
class Plot:
    name: str
    png: bytes


@dataclass(slots=True)
class ReportData:
    summary: dict
    """The report's JSON: :func:`rankgate.report.json_summary.summarize`'s result with the
    verdict, the run, the stages, what is incomplete and the trend added."""
    stages: list[dict] = field(default_factory=list)
    failures: list[FailedTest] = field(default_factory=list)
    bench: list[BenchTable] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    generated: str = ""
    run: dict | None = None
    """run.json: started, command, commit, machine, planned; None when absent."""
    incomplete: dict[str, list[str]] = field(default_factory=dict)
    """``interrupted`` (stages still marked running), ``stages`` (stages that ended
    incomplete, ``stage: why``), ``never ran`` (planned, no result) and ``stopped`` (JUnit
    of a run a signal cut short, or with no test: ``source: why``)."""
    trend: history.Trend | None = None
    out_dir: str = "out"
    """The output folder the report is written to (summary.md links its report.html)."""

    @property
    def verdict(self) -> str:
        """failed, incomplete or passed: a run that did not finish never reads passed.

        The test a signal stopped is no failure of its own: its run is incomplete."""
        stage_failed = any(s.get("status") == "failed" for s in self.stages)
        bench_failed = any("regressed" in t.verdicts for t in self.bench)
        failing = [f for f in self.summary.get("failing") or () if not f.get("interrupted")]
        if failing or stage_failed or bench_failed:
            return "failed"
        if any(self.incomplete.values()) or self.summary.get("not_run"):
            return "incomplete"
        return "passed"

    @property
    def ok(self) -> bool:
        return self.verdict == "passed"

    @property
    def not_run(self) -> list[str]:
        """The tests that never ran (a run stopped or interrupted before them)."""
        tests = self.summary.get("tests") or {}
        return [test for test, outcome in tests.items() if outcome == "not run"]


def collect(
    out_dir: Path,
    junit: Iterable[str | Path] = (),
    bench: Iterable[str | Path] = (),
    plots: Iterable[str | Path] = (),
    history_dir: Path | None = None,
    run_id: str | None = None,
) -> ReportData:
    """Gather a report; explicit files win over what ``out_dir`` holds. ``run_id``: of a
    folder of several in-place runs' files, that run's (else the newest's)."""
    junit = [str(p) for p in junit] or _junit_files(out_dir)
    bench = [str(p) for p in bench] or sorted(str(p) for p in (out_dir / "bench").glob("*.json"))
    plots = [Path(p) for p in plots] or sorted((out_dir / "bench").rglob("*.png"))
    stages = read_stages(out_dir)
    run = read_run(out_dir)
    if not junit and not bench and not stages:
        raise ReportInputError(
            f"nothing to report in {out_dir}: no junit/*.xml, stages/*.json, gate.json or "
            "bench/*.json (run a stage first, e.g. nox -s unit, or name the files)"
        )
    summary = summarize(junit, bench, run_id) if junit or bench else summarize_nothing()
    tables = [
        table
        for item in summary.get("bench", [])
        for table in bench_tables(short_path(item["file"]), item["data"], Path(item["file"]))
    ]
    data = ReportData(
        summary=summary,
        stages=stages,
        failures=stopper_first(
            failed_tests(junit, run_id) if junit else [],
            [g["reason"] for g in summary.get("not_run") or ()],
        ),
        bench=tables,
        plots=[Plot(name=_plot_name(p, out_dir), png=p.read_bytes()) for p in plots],
        generated=runinfo.now(),
        run=run,
        incomplete=incomplete(run, stages) | _stopped(summary, stages),
        out_dir=str(out_dir),
    )
    summary.update(
        format=history.REPORT_FORMAT,
        verdict=data.verdict,
        generated=data.generated,
        run=run,
        incomplete=data.incomplete,
        stages=stages,
    )
    summary["ok"] = data.ok
    if history_dir is not None:
        data.trend = history.trend(history.read_history(history_dir), summary)
        summary["trend"] = data.trend.to_json() if data.trend else None
    return data


def summarize_nothing() -> dict:
    """The summary of a run that produced no test results yet (only stage outcomes)."""
    return {"ok": True, "totals": count(()), "groups": [], "failing": [], "not_run": [],
            "incomplete": [], "other_runs": [], "skips": [],
            "xfails": [], "xpassed": [], "slowest": [], "tests": {}, "bench": [],
            "metrics": {}}  # fmt: skip


def incomplete(run: dict | None, stages: list[dict]) -> dict[str, list[str]]:
    """Stages still marked running (interrupted), stages that ended incomplete (their
    selection ran no test, or a signal stopped them: ``stage: why``) and planned stages
    with no result."""
    seen = {s["stage"] for s in stages}
    planned = (run or {}).get("planned") or []
    ended = [f"{s['stage']}: {s.get('reason') or 'incomplete'}"
             for s in stages if s["status"] == "incomplete"]  # fmt: skip
    return {
        "interrupted": [s["stage"] for s in stages if s["status"] == runinfo.RUNNING],
        **({"stages": ended} if ended else {}),
        "never ran": [name for name in planned if name not in seen],
    }


def _stopped(summary: dict, stages: list[dict]) -> dict[str, list[str]]:
    """``{"stopped": [...]}``: JUnit sources whose run a signal cut short, or that hold no
    test, with why ({} when none). A skipped stage may leave an empty file, which is no
    loss; an incomplete stage's empty file is said by the stage's own reason."""
    said = {s["stage"]: s.get("status") for s in stages if s.get("status") in _EMPTY_SAID}
    found = [
        f"{short_path(item['source'])}: {item['why']}"
        for item in summary.get("incomplete") or ()
        if not _empty_said(item, said)
    ]
    return {"stopped": found} if found else {}


_EMPTY_SAID = ("skipped", "incomplete")


def _empty_said(item: dict, said: dict[str, str]) -> bool:
    """A JUnit source whose stage already says why it is empty (or skipped)."""
    source = Path(item["source"])
    status = said.get(source.stem) or said.get(source.name)
    return status == "skipped" or (status == "incomplete" and item["why"].startswith(NO_TEST))


def short_path(path: str) -> str:
    """A path as a reader needs it: from the repository's benchmarks/ or out/ folder on,
    else relative to here; never a temporary folder's full path."""
    for anchor in ("/benchmarks/", "/out/"):
        if anchor in path:
            return anchor[1:] + path.split(anchor, 1)[1]
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def _plot_name(path: Path, out_dir: Path) -> str:
    return str(path.relative_to(out_dir)) if path.is_relative_to(out_dir) else path.name


def _junit_files(out_dir: Path) -> list[str]:
    """junit/'s JUnit files, and the results files of ranks that died before writing one
    (which of them stand is :mod:`rankgate.report.runs`'s choice)."""
    folder = out_dir / "junit"
    if not folder.is_dir():
        return []
    junit = sorted(str(p) for p in folder.rglob("*.xml"))
    with_results = sorted({p.parent for p in folder.rglob(f"*{rankresults.SUFFIX}")})
    return junit + [f for d in with_results for f in rankresults.results_files(d)]


def read_stages(out_dir: Path) -> list[dict]:
    """Each stage's latest outcome: stages/*.json over the gate's table (gate.json)."""
    found: dict[str, dict] = {}
    gate = out_dir / "gate.json"
    if gate.is_file():
        rows = _json_file(gate)
        if not isinstance(rows, list):
            raise ReportInputError(
                f"{gate}: not the gate's table (a JSON list of stage outcomes, as the gate "
                f"writes), but a {type(rows).__name__}"
            )
        for row in rows:
            row = _stage_row(gate, row)
            found[row["stage"]] = row
    for path in sorted((out_dir / "stages").glob("*.json")):
        row = _stage_row(path, _json_file(path))
        found[row["stage"]] = row
    order = {name: i for i, name in enumerate(STAGE_ORDER)}
    return sorted(found.values(), key=lambda r: order.get(r["stage"], len(order)))


def read_run(out_dir: Path) -> dict | None:
    """run.json, checked; None when the run did not write one."""
    path = out_dir / "run.json"
    if not path.is_file():
        return None
    doc = _json_file(path)
    if not isinstance(doc, dict) or doc.get("format") != runinfo.RUN_FORMAT:
        raise ReportInputError(f"{path}: not a run description (format {runinfo.RUN_FORMAT!r})")
    if not isinstance(doc.get("planned", []), list) or not isinstance(doc.get("machine", {}), dict):
        raise ReportInputError(f"{path}: 'planned' must be a list and 'machine' an object")
    return doc


def _json_file(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportInputError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ReportInputError(f"{path}: not JSON ({exc})") from None


def _stage_row(path: Path, row: object) -> dict:
    """One stage outcome, checked: a stage name, a known status, a number of seconds."""
    if not isinstance(row, dict) or not isinstance(row.get("stage"), str) or not row["stage"]:
        raise ReportInputError(
            f"{path}: not a stage outcome (an object with 'stage' and 'status', as the "
            f"executor writes), got {json.dumps(row)[:80]}"
        )
    status = row.get("status")
    if status not in STATUSES:
        raise ReportInputError(
            f"{path}: stage {row['stage']!r} has status {status!r}; known: {', '.join(STATUSES)}"
        )
    seconds = row.get("seconds", 0)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise ReportInputError(f"{path}: stage {row['stage']!r} has seconds {seconds!r}")
    return row


def bench_tables(title: str, data: object, path: Path) -> list[BenchTable]:
    """A benchmark file's tables: comparisons, harness rows, comm results, else nothing."""
    tables = _bench_tables(title, data, path)
    return [
        BenchTable(title=t.title, columns=t.columns, rows=t.rows, verdicts=t.verdicts,
                   notes=t.notes, source=str(path), committed=t.committed)
        for t in tables
    ]  # fmt: skip


def _bench_tables(title: str, data: object, path: Path) -> list[BenchTable]:
    if isinstance(data, dict) and data.get("format") == "rankgate.compare/1":
        return [_comparison_table(c, data.get("notes", [])) for c in data.get("comparisons", [])]
    runs = [doc for doc in _all_json_lines(path) if _is_harness(doc)]
    if runs:  # a saved bench harness --json run, one JSON line per repetition
        rows = [dict(r, run=i + 1) for i, doc in enumerate(runs) for r in doc]
        probes = [p for doc in _all_json_lines(path) if isinstance(doc, dict)
                  for p in doc.get(PROBE_KEY, [])]  # fmt: skip
        notes = ()
        if probes:
            others = max(p.get("others_share", 0.0) for p in probes)
            notes = (f"other work on the machine took up to {100 * others:.0f}% of its CPUs "
                     "during these runs",)  # fmt: skip
        table = _table(title, rows)
        return [BenchTable(title=table.title, columns=table.columns, rows=table.rows, notes=notes)]
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        keep = ("collective", "backend", "dtype", "bytes", "eager_us", "graph_us", "eager_busbw")
        rows = [{k: r.get(k) for k in keep} for r in data["results"]]
        return [_table(title, rows)]
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        return [_table(title, data)]
    return []


def _is_harness(data: object) -> bool:
    rows = data if isinstance(data, list) else []
    return bool(rows) and all(isinstance(r, dict) and "pool_ms_per_test" in r for r in rows)


def _all_json_lines(path: Path) -> list:
    """Every JSON line of a saved --json run with repetitions (bench --repeat)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    docs = []
    for line in lines:
        if line.startswith(("[", "{")):
            try:
                docs.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return docs


def _table(title: str, rows: list[dict]) -> BenchTable:
    columns = tuple(dict.fromkeys(k for r in rows for k in r))
    return BenchTable(
        title=title,
        columns=columns,
        rows=tuple(tuple(_cell(r.get(c)) for c in columns) for r in rows),
    )


COMMITTED_RUNS = "committed runs of"
"""How ``bench compare --committed`` names its NEW side ("3 committed runs of cpu")."""


def _comparison_table(c: dict, notes: list[str]) -> BenchTable:
    columns = ("metric", "size", "base", "new", "ratio", "change", "threshold", "verdict")
    rows, verdicts = [], []
    for r in c.get("rows", []):
        if r["verdict"] in ("missing", "new"):
            continue
        rows.append((
            r["metric"], r["size"], _cell(r["base"]), _cell(r["new"]), _cell(r["ratio"]),
            _pct(r["change"]), _pct(r["threshold"]), r["verdict"],
        ))  # fmt: skip
        verdicts.append(r["verdict"])
    title = f"{c['benchmark']}: {short_path(c['new'])} against {short_path(c['base'])}"
    notes = [*c.get("regressions", []), *c.get("notes", []), *notes]
    return BenchTable(
        title=title, columns=columns, rows=tuple(rows), verdicts=tuple(verdicts),
        notes=tuple(notes), committed=COMMITTED_RUNS in str(c.get("new", "")),
    )  # fmt: skip


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"
