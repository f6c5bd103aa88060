"""Per-rank results files, read back: each test's outcome on one rank, appended as the test ends
(written by ``rankgate.harness.rankfiles``).

In-place mode writes ``<junit stem>.rank<r>.jsonl`` beside the rank's JUnit file (and
removes it once that JUnit file is written). A rank that dies without writing its
JUnit file (``os._exit``, a signal, the OOM killer) leaves this file instead, whose
last ``begin`` without an ``end`` names the test it died in, so a crash loses at most
that test's own result. ``rankgate merge-junit`` falls back to it for a rank that has
no JUnit file of the same run (an earlier run's JUnit file may still be there).

One JSON object per line: ``{"event": "rank", "rank", "world_size", "run_id"}`` first,
``{"event": "collected", "tests": [...]}`` (the run's tests: those the rank never began
are "not run"), then ``{"event": "begin", "classname", "name"}`` when a test starts and
``{"event": "end", "classname", "name", "outcome", "message", "text", "time", "stdout",
"stderr"}`` when it ends. A torn last line (the rank died while writing it) is ignored.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

from rankgate.harness import crashrecord
from rankgate.harness.rankfiles import SUFFIX, results_path
from rankgate.harness.verdict_lines import NODE_ID_PROPERTY, NOT_RUN_PREFIX, RANKS_PROPERTY
from rankgate.report.junitfile import (
    CaseResult,
    JUnitFile,
    ReportInputError,
    read_junit,
)

_RANK_IN_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)


def read_results(path: str | Path) -> JUnitFile:
    """One rank's results file as a JUnit file; the test it died in counts as crashed."""
    path = str(path)
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        raise ReportInputError(f"{path}: no such file") from None
    except OSError as exc:
        raise ReportInputError(f"{path}: cannot read ({exc.strerror})") from None
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                break  # the rank died while writing its last line
            raise ReportInputError(f"{path}:{number}: not a results record") from None
    if not records or records[0].get("event") != "rank":
        raise ReportInputError(f"{path}: not a rankgate results file (no rank record first)")
    rank, world = records[0].get("rank"), records[0].get("world_size")
    cases: dict[tuple[str, str], CaseResult] = {}
    for record in records[1:]:
        if record.get("event") == "collected":
            cases.update(_not_run(record.get("tests") or (), rank, path))
            continue
        key = (record.get("classname", ""), record.get("name", ""))
        if record.get("event") == "begin":  # its node id, from the collected list
            props = cases[key].properties if key in cases else ()
            cases[key] = dataclasses.replace(_crashed(key, rank, path), properties=props)
        elif record.get("event") == "end":
            cases[key] = CaseResult(
                classname=key[0],
                name=key[1],
                rank=rank,
                outcome=record.get("outcome", "error"),
                message=record.get("message", ""),
                text=record.get("text", ""),
                time=float(record.get("time", 0.0)),
                system_out=record.get("stdout", ""),
                system_err=record.get("stderr", ""),
                properties=_properties(record),
                source=path,
            )
    crashed = [c.test_id for c in cases.values() if crashed_in(c.message)]
    run_id = str(records[0].get("run_id") or "")
    cases.update(_with_crash_record(cases, path, run_id))
    return JUnitFile(
        path=path,
        rank=rank,
        world_size=world,
        suite_names=(),
        cases=tuple(cases.values()),
        # A rank that finished writes its JUnit file: one that left this file did not
        # finish its run. The run is INCOMPLETE, as a signal-stopped one is; the test it
        # died in still counts as failed (crashed), but as the run's interruption.
        interrupted=_why_unfinished(rank, path, crashed, records),
        interrupted_tests=tuple(crashed),
        run_id=run_id,
    )


def _unfinished(rank: int, path: str, crashed: list[str]) -> str:
    """Why a rank's results file (with no JUnit file of its run) is an unfinished run."""
    where = f"inside {crashed[0]}" if crashed else "after its last recorded test"
    return (
        f"rank {rank} ended {where} and wrote no JUnit file (killed, os._exit or the OOM "
        f"killer): its run did not finish ({Path(path).name})"
    )


def _why_unfinished(rank: int, path: str, crashed: list[str], records: list[dict]) -> str:
    """Why a rank's results file (with no JUnit file of its run) is an unfinished run: a
    file holding only its launch's first record was begun by a launch killed before it
    recorded anything (:func:`rankgate.harness.rankfiles.mark_launch`)."""
    if len(records) > 1:
        return _unfinished(rank, path, crashed)
    return _killed_before_its_first_result(rank, path, records[0].get("started"))


def _killed_before_its_first_result(rank: int, path: str, started) -> str:
    """Why a results file that holds only its launch's mark is an unfinished run."""
    when = ""
    if isinstance(started, int | float):
        when = time.strftime(" at %Y-%m-%d %H:%M:%S", time.localtime(started))
    return (
        f"rank {rank} started a new run into this folder{when} and ended before it "
        f"recorded any result (killed, or stopped by an error before its tests: see its "
        f"log); the folder's earlier results are not this run's ({Path(path).name})"
    )


def _not_run(tests, rank: int, path: str) -> dict[tuple[str, str], CaseResult]:
    """The collected tests, each "not run" until the file says it began."""
    message = f"{NOT_RUN_PREFIX}rank {rank} ended before this test began"
    found = {}
    for test in tests:
        if not isinstance(test, dict):
            raise ReportInputError(f"{path}: its collected tests are not records")
        key = (test.get("classname", ""), test.get("name", ""))
        props = _properties(test)
        found[key] = CaseResult(key[0], key[1], rank, "not run", message, properties=props,
                                source=path)  # fmt: skip
    return found


def _properties(record: dict) -> tuple[tuple[str, str], ...]:
    """A test's node id and the global ranks that ran it, where the record names them."""
    props = ((NODE_ID_PROPERTY, record["nodeid"]),) if record.get("nodeid") else ()
    ranks = record.get("ranks")
    if isinstance(ranks, list) and ranks:
        props += ((RANKS_PROPERTY, ",".join(str(r) for r in ranks)),)
    return props


CRASHED_PREFIX = "crashed on rank "


def crashed_in(message: str) -> bool:
    """Whether a rank's failure message is the record of its death inside the test."""
    return message.startswith(CRASHED_PREFIX)


def _crashed(key: tuple[str, str], rank: int, path: str) -> CaseResult:
    message = f"{CRASHED_PREFIX}{rank}: the rank ended while running this test"
    text = (
        f"{message} (os._exit, a signal or the OOM killer; it wrote no JUnit file). "
        f"Its results file {path} stops at this test; its output is in its log."
    )
    return CaseResult(key[0], key[1], rank, "failed", message, text, source=path)


def _with_crash_record(cases, path: str, run_id: str) -> dict[tuple[str, str], CaseResult]:
    """The test the rank died in, with the line its crash record names and its stacks
    (nothing when the rank left no record: os._exit, SIGKILL)."""
    died = [(key, c) for key, c in cases.items() if crashed_in(c.message)]
    if not died:
        return {}
    key, case = died[-1]  # a rank dies once: in the last test it began
    test_file = (case.node_id or "").split("::", 1)[0] or None
    crash = crashrecord.read(crashrecord.crash_path(path), run_id, test_file)
    if crash is None or not crash.place:
        return {}
    message = f"{CRASHED_PREFIX}{case.rank} {crash.words}: the rank ended while running this test"
    return {
        key: dataclasses.replace(
            case,
            message=message,
            text=f"{case.text}\nIts crash record {crashrecord.crash_path(path)}:\n{crash.stacks}",
            properties=(*case.properties, (crashrecord.CRASHED_AT_PROPERTY, crash.place)),
        )
    }


def expand(paths) -> list[str]:
    """Paths to read: each directory's per-rank JUnit files and results files (which run
    each belongs to, and which file of a rank stands, :mod:`rankgate.report.runs`
    decides); a named JUnit file that is missing gives way to its results file.
    """
    out: list[str] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            junit = sorted(str(f) for f in path.glob("*.xml") if _RANK_IN_NAME.search(f.name))
            results = results_files(path)
            if not junit and not results:
                raise ReportInputError(
                    f"{path}: directory holds no per-rank JUnit files (*rank<r>*.xml) "
                    f"and no results files (*rank<r>*{SUFFIX})"
                )
            out.extend(junit + results)
        elif not path.exists() and results_path(path).is_file():
            out.append(str(results_path(path)))
        else:
            out.append(str(path))
    return out


def results_files(directory: Path) -> list[str]:
    """The per-rank results files in ``directory``: of ranks that died before writing
    their JUnit file, in this run or an earlier one into the same folder."""
    return sorted(str(f) for f in directory.glob(f"*{SUFFIX}") if _RANK_IN_NAME.search(f.name))


def read_any(path: str) -> JUnitFile:
    """A JUnit file, or a results file (``.jsonl``)."""
    return read_results(path) if path.endswith(SUFFIX) else read_junit(path)
