"""One run's per-rank files, where a folder holds files of several runs.

In-place runs write ``junit.rank<r>.xml`` (and, while they run, ``junit.rank<r>.jsonl``)
into the folder ``--junitxml`` names; a later run into the same folder replaces a file
only when it gets to write it. A run killed mid-test leaves its results files beside
the earlier run's JUnit files, and a rank of it that finished leaves its JUnit file
beside a killed rank's old one. Each file names its run (the ``rankgate.run_id`` of
:mod:`rankgate.harness.inplace.run_id`): :func:`pick_run` keeps one run's files, the
one named, else the newest (the latest modification time among its files), and says in
one line which files of other runs it left out. Of one rank's files in that run, its
JUnit file stands over its results file (the results file is removed once the JUnit
file is written; both are there only when the rank was killed between the two).
Files written before runs had ids count as one more run, with no id.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rankgate.harness.rankfiles import SUFFIX
from rankgate.report.junitfile import JUnitFile, ReportInputError


@dataclass(frozen=True, slots=True)
class Picked:
    """The files of the run that was read, and what was left out."""

    files: list[JUnitFile]
    run_id: str
    """"" for files without a run id."""
    other_runs: str = ""
    """One line naming the other runs' files left out; "" when there were none."""


def pick_run(files: Sequence[JUnitFile], run_id: str | None = None) -> Picked:
    """The files of run ``run_id``, else of the newest run (see the module docstring);
    ReportInputError when no file belongs to the named run."""
    runs: dict[str, list[JUnitFile]] = {}
    for f in files:
        runs.setdefault(f.run_id, []).append(f)
    if run_id is not None and run_id not in runs:
        raise ReportInputError(
            f"no file of run {run_id!r} in {_where(files)}; runs there: {_listed(runs)} "
            "(pass one of them to --run-id, or leave it out to read the newest)"
        )
    newest = max(runs, key=lambda r: (_latest(runs[r]), r))
    chosen = newest if run_id is None else run_id
    kept = _one_per_rank(runs[chosen])
    note = ""
    if len(runs) > 1:
        how = "the newest" if chosen == newest else "as named"
        others = [r for r in runs if r != chosen]
        left = ", ".join(f"{_name(r)} ({_files(runs[r])})" for r in others)
        note = (
            f"{_where(files)} holds files of {len(runs)} runs: read run {_name(chosen)} "
            f"({how}); left out {left}; --run-id ID reads another"
        )
    return Picked(kept, chosen, note)


def with_run(files: Sequence[JUnitFile], run_id: str | None) -> str | None:
    """``run_id`` where one of ``files`` belongs to it, else None (read the newest): a
    report over several folders reads the named run where it is."""
    return run_id if run_id is not None and any(f.run_id == run_id for f in files) else None


def _one_per_rank(files: list[JUnitFile]) -> list[JUnitFile]:
    """A rank's results file only when that rank has no JUnit file in this run."""
    with_junit = {f.rank for f in files if not f.path.endswith(SUFFIX)}
    return [f for f in files if not (f.path.endswith(SUFFIX) and f.rank in with_junit)]


def _latest(files: list[JUnitFile]) -> float:
    times = []
    for f in files:
        try:
            times.append(os.stat(f.path).st_mtime)
        except OSError:
            continue
    return max(times, default=0.0)


def _where(files: Sequence[JUnitFile]) -> str:
    folders = sorted({str(Path(f.path).parent) for f in files})
    return folders[0] if len(folders) == 1 else "the files given"


def _name(run_id: str) -> str:
    return run_id or "(no run id)"


def _files(files: list[JUnitFile]) -> str:
    return ", ".join(sorted(Path(f.path).name for f in files))


def _listed(runs: dict[str, list[JUnitFile]]) -> str:
    return ", ".join(_name(r) for r in sorted(runs, key=lambda r: -_latest(runs[r])))
