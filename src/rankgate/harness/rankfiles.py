"""The files an in-place rank writes beside its JUnit file, and what ties them to one run.

The in-place wing writes them (:mod:`rankgate.harness.inplace.records`); merge-junit and
the report read them back (:mod:`rankgate.report`). Standard library only.

- The run id: the JUnit testsuite property :data:`RUN_ID_PROPERTY`, and the field
  ``run_id`` of the records below (:mod:`rankgate.harness.inplace.run_id` makes it).
- The results file ``<junit stem>.rank<r>.jsonl``: each test's outcome on this rank,
  appended as the test ends, removed once the rank's JUnit file is written. A rank that
  dies without writing its JUnit file leaves this file instead. One JSON object per line:
  ``{"event": "rank", "rank", "world_size", "run_id"}`` first, then once collection is
  done ``{"event": "collected", "tests": [{"classname", "name", "nodeid"}, ...]}`` (every
  test the run is to run, so a rank killed mid-run leaves the later ones "not run"), then
  ``{"event": "begin", "classname", "name"}`` when a test starts and ``{"event": "end",
  "classname", "name", "outcome", "message", "text", "time", "stdout", "stderr"}`` when
  it ends.
- The launch's mark: the results file's first record, written by :func:`mark_launch` as
  the rank's first act (before its process group, before any test), without a run id
  (the ranks have not agreed on one yet). A run killed before it wrote anything else
  leaves this file newer than the folder's earlier files: merge-junit and the report read
  it as the newest run, INCOMPLETE, never the earlier run's verdict.
- The plan file ``<junit stem>.rank<r>.plan``: every test of the run (not only this
  rank's share) with the ranks that run it, ``{"run_id", "world_size", "tests":
  [{"classname", "name", "nodeid", "ranks"}, ...]}``, so a test whose only rank left no
  file is still named in the merged file (not run).
- The ledger file ``<junit stem>.rank<r>.ledger``: the collectives the rank issued in
  every test that went wrong, one JSON object a line, ``{"classname", "name",
  "ledger": [...], "run_id"}`` (the records of ``rankgate.harness.ledger.snapshot``).
  Runs into the same folder append to one file: a reader takes one run's lines.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

RUN_ID_PROPERTY = "rankgate.run_id"
"""The JUnit testsuite property (and results/ledger record field ``run_id``)."""

# -- the results file ------------------------------------------------------------------

SUFFIX = ".jsonl"
"""The results file's suffix."""


def results_path(junit_path: str | Path) -> Path:
    """The results file that goes with a rank's JUnit file (``junit.rank1.xml``)."""
    return Path(junit_path).with_suffix(SUFFIX)


def rank_junit_path(junit_path: str | Path, rank: int) -> Path:
    """The rank's own JUnit file of ``--junitxml junit_path``: ``junit.rank<r>.xml``."""
    path = Path(junit_path)
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def mark_launch(rank_junit: str | Path, rank: int, world_size: int) -> None:
    """The rank's first act in a launch: its results file, begun anew (its record names
    no run id yet; ``ResultsWriter`` begins it again once the ranks agree on one)."""
    path = results_path(rank_junit)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"event": "rank", "rank": rank, "world_size": world_size, "started": time.time()}
    path.write_text(json.dumps(record) + "\n")


class ResultsWriter:
    """Appends one rank's records, each line flushed to the OS as it is written."""

    def __init__(self, path: Path, rank: int, world_size: int, run_id: str = "") -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        record = {"event": "rank", "rank": rank, "world_size": world_size}
        self._write({**record, "run_id": run_id} if run_id else record)

    def collected(self, tests: list[dict]) -> None:
        """``tests``: each test's classname, name and nodeid, in the order of the run."""
        self._write({"event": "collected", "tests": tests})

    def begin(self, classname: str, name: str) -> None:
        self._write({"event": "begin", "classname": classname, "name": name})

    def end(self, case: dict) -> None:
        """``case``: classname, name, outcome and optionally message, text, time, stdout, stderr."""
        self._write({"event": "end", **case})

    def _write(self, record: dict) -> None:
        if self._fd is None:
            return
        # One write per record: a rank killed mid-test leaves whole lines behind.
        os.write(self._fd, (json.dumps(record) + "\n").encode())

    def close(self, *, remove: bool) -> None:
        """Stop writing; ``remove`` once the rank's JUnit file holds everything."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if remove:
            self.path.unlink(missing_ok=True)


# -- the ledger file -------------------------------------------------------------------

PLAN_SUFFIX = ".plan"
"""Not .jsonl, not .xml: merge-junit reads it beside a rank's file, never as one."""


def plan_path(junit_path: str | Path) -> Path:
    """The plan file that goes with a rank's JUnit or results file."""
    return Path(junit_path).with_suffix(PLAN_SUFFIX)


def write_plan(path: Path, run_id: str, world_size: int, tests: list[dict]) -> None:
    """The run's tests (each ``classname``, ``name``, ``nodeid``, ``ranks``), in one write."""
    record = {"run_id": run_id, "world_size": world_size, "tests": tests}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record) + "\n")


def read_plan(path: Path, run_id: str) -> list[dict]:
    """The tests of run ``run_id``'s plan in ``path``; [] for no file, another run's, or
    one that cannot be read (a rank killed while writing it)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(record, dict) or record.get("run_id", "") != run_id:
        return []
    tests = record.get("tests")
    return [t for t in tests if isinstance(t, dict)] if isinstance(tests, list) else []


LEDGER_SUFFIX = ".ledger"
"""Not .jsonl: merge-junit takes every .jsonl of a folder for a results file."""


def ledger_path(junit_path: str | Path) -> Path:
    """The ledger file that goes with a rank's JUnit file (``junit.rank1.xml``)."""
    path = Path(junit_path)
    return path.with_name(path.stem + LEDGER_SUFFIX)


def append_ledger(
    path: Path, classname: str, name: str, entries: list[dict], run_id: str = ""
) -> None:
    """One test's ledger, in one write (a rank killed next leaves whole lines)."""
    record = {"classname": classname, "name": name, "ledger": entries}
    line = json.dumps({**record, "run_id": run_id} if run_id else record) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_ledger(path: Path, run_id: str = "") -> dict[tuple[str, str], list[dict]]:
    """(classname, name) -> that test's ledger in run ``run_id`` ("": lines without an
    id, as files written before run ids were); {} for no file. A torn last line (the rank
    died writing it) is left out."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
            if record.get("run_id", "") != run_id:
                continue
            found[(record["classname"], record["name"])] = record["ledger"]
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return found
