"""A rank's crash record: the stacks faulthandler writes as the rank dies of a fatal
signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL), and the line it died on, read back.

In the pool the controller reads a dead rank's faulthandler stacks from its stderr file.
An in-place rank's stderr is the launcher's terminal, which no survivor can read: each
in-place rank points faulthandler at a file of its own, ``<junit stem>.rank<r>.crash``
beside its results file (``pytest.rank<r>.crash`` in the run's folder without
``--junitxml``). A surviving peer on the same host names the line from it, and so does
merge-junit, from the file left beside the dead rank's results file.

The file begins with one header line naming the rank and the run; faulthandler appends
the stacks below it only when the rank dies of such a signal. A rank that finishes removes
it. ``os._exit``, SIGKILL and the OOM killer leave no stacks: no line is named then, as in
the pool. Standard library only: merge-junit reads it.
"""

from __future__ import annotations

import faulthandler
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rankgate.harness import ledger_waits, verdict_lines
from rankgate.harness.stacks import Where
from rankgate.harness.stacks import where as stack_where

SUFFIX = ".crash"
"""Not .jsonl or .xml: merge-junit reads every such file of a folder as a rank's results."""
CRASHED_AT_PROPERTY = "rankgate.crashed_at"
"""A dead rank's case in merge-junit: where its record says it died ('at x.py:12')."""
_HEADER = "rankgate crash record: rank {rank}, run {run_id}\n"
_FATAL = "Fatal Python error: "


def crash_path(junit_or_log_path: str | Path) -> Path:
    """The crash record that goes with a rank's JUnit file (``junit.rank1.xml`` gives
    ``junit.rank1.crash``) or its results file."""
    return Path(junit_or_log_path).with_suffix(SUFFIX)


@dataclass(frozen=True, slots=True)
class Crash:
    """What a dead rank's record says."""

    error: str
    """faulthandler's first line, "Fatal Python error: Aborted" ('' if cut off)."""
    where: Where | None
    """Where its test's thread was; None when the stacks hold no frame."""
    stacks: str
    """faulthandler's text, every thread's stack."""

    @property
    def place(self) -> str:
        """'in all_reduce at x.py:29' or 'at x.py:12' ('' when no frame of user code)."""
        if self.where is None or self.where.frame is None:
            return ""
        what = f"in {self.where.collective} " if self.where.collective else ""
        return f"{what}at {self.where.frame.place}"

    @property
    def words(self) -> str:
        """'at x.py:12 (Fatal Python error: Aborted)': how the rank died, for a verdict."""
        error = f"({self.error})" if self.error else ""
        return " ".join(part for part in (self.place, error) if part)


def read(path: str | Path, run_id: str = "", test_file: str | None = None) -> Crash | None:
    """The crash in the record at ``path`` written by run ``run_id`` (any run for ''),
    or None: no record, another run's, or no fatal error in it (the rank did not die of
    a fatal signal). ``test_file``: the test's file, to find its thread among the stacks."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return None
    header, _, stacks = text.partition("\n")
    if not header.startswith("rankgate crash record: ") or not stacks.strip():
        return None
    if run_id and not header.endswith(f", run {run_id}"):
        return None
    first = stacks.lstrip().split("\n", 1)[0]
    error = first.strip() if first.startswith(_FATAL) else ""
    return Crash(error, stack_where(stacks, test_file), stacks)


class CrashRecord:
    """One in-place rank's record, written by faulthandler from ``start`` to ``close``."""

    def __init__(self, path: Path, rank: int, run_id: str = "") -> None:
        self.path = path
        self._header = _HEADER.format(rank=rank, run_id=run_id)
        self._file: IO[str] | None = None
        self._was_enabled = False

    def start(self) -> None:
        """Point faulthandler at the record (it replaces pytest's handler on stderr)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w")  # noqa: SIM115 - faulthandler writes to its fd
        self._file.write(self._header)
        self._file.flush()
        self._was_enabled = faulthandler.is_enabled()
        faulthandler.enable(file=self._file, all_threads=True)

    def close(self) -> None:
        """The rank finished: faulthandler back on stderr (as pytest had it), the record gone."""
        if self._file is None:
            return
        if self._was_enabled and sys.__stderr__ is not None:
            faulthandler.enable(file=sys.__stderr__, all_threads=True)
        else:
            faulthandler.disable()
        self._file.close()
        self._file = None
        self.path.unlink(missing_ok=True)


NO_RECORD = "ended without a result: os._exit, a signal or the OOM killer"
"""How a rank that died inside a test with no crash record is said to have ended."""


def crashed_words(ranks: Sequence[int], crashes: Mapping[int, Crash]) -> str:
    """'rank 1 crashed at x.py:12 (Fatal Python error: Aborted)', or for ranks without
    a record 'ranks 2, 3 crashed (ended without a result: ...)': the recorded first."""
    parts = [f"rank {r} crashed {crashes[r].words}" for r in sorted(crashes) if r in ranks]
    unknown = [r for r in ranks if r not in crashes or not crashes[r].words]
    if unknown:
        parts.append(f"{verdict_lines.ranks(unknown)} crashed ({NO_RECORD})")
    return "; ".join(parts)


def stacks_section(crashes: Mapping[int, Crash], record_of: Callable[[int], Path]) -> str:
    """The dead ranks' stacks, for the survivor's failure text, as the pool shows a
    crashed rank's stderr ('' when no rank left any)."""
    return "".join(
        f"\n\n----- rank {r}: its fatal error ({record_of(r).name}) -----\n{c.stacks.strip()}"
        for r, c in sorted(crashes.items())
    )


def places_in(results: Mapping[int, object]) -> dict[int, str]:
    """{rank: 'at x.py:12'} of the merged cases (``CaseResult``) whose rank died there."""
    found = {}
    for rank, result in results.items():
        place = dict(getattr(result, "properties", ())).get(CRASHED_AT_PROPERTY)
        if place:
            found[rank] = place
    return found


def cause(places: Mapping[int, str], ledgers: Mapping[int, Sequence[Mapping] | None]) -> str:
    """'likely cause: rank 1 crashed at x.py:12; rank 0 was in all_reduce #2 (...) issued
    at x.py:13' as the pool says it (the peers' part only where their ledgers show them in a
    collective); '' when no rank's place is known."""
    if not places:
        return ""
    under = ledger_waits.under_crash(places, ledgers)
    died = "; ".join(f"rank {r} crashed {where}" for r, where in sorted(places.items()))
    return verdict_lines.ledger_cause(under or died)
