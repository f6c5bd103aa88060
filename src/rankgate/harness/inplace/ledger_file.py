"""The rank's ledger file, written in place beside its results file: the collectives
each rank issued in every test that went wrong, for merge-junit to compare.

``<junit stem>.rank<r>.ledger``: one JSON object a line, ``{"classname", "name",
"ledger": [...], "run_id"}`` (the records of ``rankgate.harness.ledger.snapshot``; the
run id of :mod:`.run_id`). Runs into the same folder append to one file: a reader takes
one run's lines. Standard library only: merge-junit reads it back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SUFFIX = ".ledger"
"""Not .jsonl: merge-junit takes every .jsonl of a folder for a results file."""


def ledger_path(junit_path: str | Path) -> Path:
    """The ledger file that goes with a rank's JUnit file (``junit.rank1.xml``)."""
    path = Path(junit_path)
    return path.with_name(path.stem + SUFFIX)


def append(path: Path, classname: str, name: str, entries: list[dict], run_id: str = "") -> None:
    """One test's ledger, in one write (a rank killed next leaves whole lines)."""
    record = {"classname": classname, "name": name, "ledger": entries}
    line = json.dumps({**record, "run_id": run_id} if run_id else record) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(path: Path, run_id: str = "") -> dict[tuple[str, str], list[dict]]:
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
