"""The rank's ledger file, written in place beside its results file: the collectives
each rank issued in every test that went wrong, for merge-junit to compare.

``<junit stem>.rank<r>.ledger``: one JSON object a line, ``{"classname", "name",
"ledger": [...]}`` (the records of ``rankgate.harness.ledger.snapshot``). Standard
library only: merge-junit reads it back.
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


def append(path: Path, classname: str, name: str, entries: list[dict]) -> None:
    """One test's ledger, in one write (a rank killed next leaves whole lines)."""
    line = json.dumps({"classname": classname, "name": name, "ledger": entries}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(path: Path) -> dict[tuple[str, str], list[dict]]:
    """(classname, name) -> that test's ledger; {} for no file. A torn last line (the
    rank died writing it) is left out."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
            found[(record["classname"], record["name"])] = record["ledger"]
        except (ValueError, KeyError, TypeError):
            continue
    return found
