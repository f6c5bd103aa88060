"""The rank's results file, written in place: each test's outcome on this rank, appended
as the test ends.

In-place mode writes ``<junit stem>.rank<r>.jsonl`` beside the rank's JUnit file (and
removes it once that JUnit file is written). A rank that dies without writing its
JUnit file leaves this file instead; ``rankgate.report.rankresults`` reads it back.

One JSON object per line: ``{"event": "rank", "rank", "world_size", "run_id"}`` first
(the run id, :mod:`.run_id`, ties the file to one launch), then once collection is done
``{"event": "collected", "tests": [{"classname", "name", "nodeid"}, ...]}`` (every test
the run is to run, so a rank killed mid-run leaves the later ones "not run"), then
``{"event": "begin", "classname", "name"}`` when a test starts and ``{"event": "end",
"classname", "name", "outcome", "message", "text", "time", "stdout", "stderr"}`` when
it ends. Standard library only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SUFFIX = ".jsonl"


def results_path(junit_path: str | Path) -> Path:
    """The results file that goes with a rank's JUnit file (``junit.rank1.xml``)."""
    return Path(junit_path).with_suffix(SUFFIX)


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
