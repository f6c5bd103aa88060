"""Quarantined tests (``--rankgate-quarantine FILE``): they run, and their failures do not
fail the run; one that passes ``passes_to_leave`` times in a row is reported as ready to
leave the list.

The file is TOML::

    passes_to_leave = 5                      # optional, default 5
    history = "quarantine-history.json"      # optional, default <file>.history.json

    [[test]]
    id = "suites/comm/test_ring.py::test_ring_allgather"   # a node id; without [params]
    reason = "gloo times out on loaded runners"             # it covers every case of it
    issue = "https://github.com/org/repo/issues/12"

A quarantined test runs under a non-strict xfail marker whose reason names the
quarantine, so a failure (a crash or a pool's hang too) is an expected failure and a pass
an unexpected one, in either mode and in every file that reads JUnit. Its JUnit case
carries :data:`QUARANTINE_PROPERTY` (reason, issue, and its passes in a row before this
run), so the report can list it with its outcome without the history file.

The history (a small JSON file, ``{"tests": {node id: passes in a row}}``) is read at
the start and written at the end of the run by the process that reports: the pool's
pytest (the xdist controller), rank 0 in place. A pass adds one, a skip leaves it, a
failure or a flaky pass (only on a rerun) resets it to 0. Keep the file between CI runs
(a cache) for the count to grow.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rankgate import tomlfile
from rankgate.errors import RankgateError

QUARANTINE_PROPERTY = "rankgate.quarantined"
"""A JSON object: reason, issue, streak (passes in a row before this run), needed."""
FAILURE_PROPERTY = "rankgate.quarantined_failure"
"""A quarantined test's failure text (its xfail marker keeps it out of JUnit's result)."""
STALE_PROPERTY = "rankgate.quarantine_stale"
"""A testsuite property per entry that matches no test (written once, by the process that
reports): a JSON object, entry, list (the quarantine file) and why."""
FAILURE_CHARS = 4000
XFAIL_PREFIX = "quarantined: "
DEFAULT_PASSES_TO_LEAVE = 5
HISTORY_FORMAT = "rankgate.quarantine-history/1"


class QuarantineError(RankgateError, ValueError):
    """A quarantine file that cannot be used; the message names the file and the fix."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    id: str
    reason: str
    issue: str


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantineList:
    path: Path
    entries: dict[str, Entry]
    passes_to_leave: int
    history_path: Path

    def entry_for(self, nodeid: str) -> Entry | None:
        """The entry that names ``nodeid``, or the test function it parametrizes."""
        return self.entries.get(nodeid) or self.entries.get(nodeid.split("[", 1)[0])


def load(path: str | Path) -> QuarantineList:
    """Read and check a quarantine file; raises QuarantineError naming what is wrong."""
    path = Path(path)
    try:
        data = tomlfile.read(path)
    except tomlfile.TomlFileError as exc:
        raise QuarantineError(f"quarantine file {exc}") from None
    unknown = sorted(set(data) - {"test", "passes_to_leave", "history"})
    if unknown:
        raise QuarantineError(
            f"quarantine file {path}: unknown key(s) {unknown}; it takes passes_to_leave, "
            "history and [[test]] tables"
        )
    needed = data.get("passes_to_leave", DEFAULT_PASSES_TO_LEAVE)
    if not isinstance(needed, int) or isinstance(needed, bool) or needed < 1:
        raise QuarantineError(
            f"quarantine file {path}: passes_to_leave = {needed!r} must be a whole number ≥ 1"
        )
    history = data.get("history", f"{path.stem}.history.json")
    if not isinstance(history, str) or not history.strip():
        raise QuarantineError(f"quarantine file {path}: history = {history!r} is not a path")
    tests = data.get("test", [])
    if not isinstance(tests, list):
        raise QuarantineError(f"quarantine file {path}: 'test' must be [[test]] tables")
    entries: dict[str, Entry] = {}
    for number, table in enumerate(tests, start=1):
        entry = _entry(path, number, table)
        if entry.id in entries:
            raise QuarantineError(f"quarantine file {path}: test {entry.id!r} is listed twice")
        entries[entry.id] = entry
    return QuarantineList(
        path=path, entries=entries, passes_to_leave=needed, history_path=path.parent / history
    )


def _entry(path: Path, number: int, table: object) -> Entry:
    where = f"quarantine file {path}: [[test]] number {number}"
    if not isinstance(table, dict):
        raise QuarantineError(f"{where} is not a table")
    unknown = sorted(set(table) - {"id", "reason", "issue"})
    if unknown:
        raise QuarantineError(f"{where}: unknown key(s) {unknown}; it takes id, reason, issue")
    for key in ("id", "reason", "issue"):
        value = table.get(key)
        if not isinstance(value, str) or not value.strip():
            what = {"id": "the test's node id", "reason": "why it is quarantined",
                    "issue": "a link to the issue that tracks it"}[key]  # fmt: skip
            raise QuarantineError(f"{where} has no {key} ({what})")
    return Entry(id=table["id"].strip(), reason=table["reason"].strip(),
                 issue=table["issue"].strip())  # fmt: skip


def stale(listed: QuarantineList, rootdir: Path) -> list[str]:
    """One line per entry that names no test (:func:`stale_entries`)."""
    return [stale_line(found) for found in stale_entries(listed, rootdir)]


def stale_line(found: dict) -> str:
    """The warning for one of :func:`stale_entries` (or a :data:`STALE_PROPERTY`'s value)."""
    return (
        f"quarantine entry {found['entry']!r} in {found['list']} matches no test "
        f"({found['why']}): remove it from the list, or correct its id"
    )


def stale_entries(listed: QuarantineList, rootdir: Path) -> list[dict]:
    """Each entry that names no test, as {entry, list, why}: its file is gone, or holds no
    function (or class method) of that name. Read from the source, so a narrower run
    (``-k``, ``-m``, a path, xdist) sees the same; a test made at run time (a loop of
    ``def``) reads as missing, and its line says to check."""
    found = []
    for entry in listed.entries.values():
        path, _, name = entry.id.split("[", 1)[0].partition("::")
        source = rootdir / path
        if not source.is_file():
            why = f"no file {path} under {rootdir}"
        elif name and name not in _test_names(source):
            why = f"{path} defines no {name}"
        else:
            continue
        found.append({"entry": entry.id, "list": str(listed.path), "why": why})
    return found


def read_stale(value: str) -> dict | None:
    """A :data:`STALE_PROPERTY` value; None when it is not one (a hand-edited file)."""
    try:
        found = json.loads(value)
    except ValueError:
        return None
    keys = ("entry", "list", "why")
    if not isinstance(found, dict) or not all(isinstance(found.get(k), str) for k in keys):
        return None
    return {k: found[k] for k in keys}


def _test_names(path: Path) -> set[str]:
    """``func`` and ``Class::method`` for every def of the module; every name when it
    cannot be read (pytest says why when it collects the file)."""
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return _Everything()
    defs = (ast.FunctionDef, ast.AsyncFunctionDef)
    names = {node.name for node in tree.body if isinstance(node, defs)}
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        names.add(cls.name)
        names |= {f"{cls.name}::{node.name}" for node in cls.body if isinstance(node, defs)}
    return names


class _Everything(set):
    def __contains__(self, item: object) -> bool:
        return True


def read_history(path: Path) -> dict[str, int]:
    """Each test's passes in a row; {} for a file not there yet. A file that is not a
    history is an error: writing over it would lose what it holds."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise QuarantineError(f"quarantine history {path}: cannot read it ({exc})") from None
    tests = data.get("tests") if isinstance(data, dict) else None
    if not isinstance(tests, dict) or data.get("format") != HISTORY_FORMAT:
        raise QuarantineError(
            f"quarantine history {path}: not a {HISTORY_FORMAT} file; move it away or name "
            "another history in the quarantine file"
        )
    return {str(k): int(v) for k, v in tests.items() if isinstance(v, int)}


def write_history(path: Path, streaks: dict[str, int]) -> None:
    """Write the history whole, atomically (a run killed meanwhile leaves the old one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = {"format": HISTORY_FORMAT, "tests": dict(sorted(streaks.items()))}
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def next_streak(streak: int, outcome: str) -> int:
    """Passes in a row after one more run ending in ``outcome``: a pass adds one, a skip
    leaves the count, anything else (failed, or flaky: passed only on a rerun) resets it."""
    if outcome == "passed":
        return streak + 1
    return streak if outcome == "skipped" else 0


def property_value(entry: Entry, streak: int, needed: int) -> str:
    return json.dumps(
        {"reason": entry.reason, "issue": entry.issue, "streak": streak, "needed": needed},
        sort_keys=True,
    )


def read_property(value: str) -> dict | None:
    """The quarantine a JUnit property records (None for a value that is not one)."""
    try:
        data = json.loads(value)
    except ValueError:
        return None
    keys = {"reason", "issue", "streak", "needed"}
    return data if isinstance(data, dict) and keys <= set(data) else None


def streak_text(streak: int, needed: int) -> str:
    """ "3 of 5" or "5 of 5: ready to leave the list"."""
    text = f"{streak} of {needed}"
    return text + ": ready to leave the list" if streak >= needed else text
