"""A gate or stage stopped by a signal rewrites its page on the way out.

SIGINT (Ctrl-C) reaches the executor as KeyboardInterrupt once the running command's
tree has ended; SIGTERM and SIGHUP end the trees in :mod:`rankgate.proc.command`, which
then dies of the signal after its last words (:func:`~rankgate.proc.command.last_words`).
Either way, inside :func:`rewrite_on_stop`:

- every stage of the run still marked running becomes INCOMPLETE, "stopped by SIGINT
  while it ran", with the tests its JUnit holds (pytest writes it as it stops);
- a gate writes gate.json (every outcome of this run, in order) and prints its table,
  with the stage that was running and those it never started;
- out/report.html and summary.md are rewritten: INCOMPLETE, never the page written when
  the stage started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

from rankgate.pipeline.options import Options
from rankgate.pipeline.stage_outcome import Outcome, record, refresh_report
from rankgate.pipeline.table import summary_table
from rankgate.proc import command
from rankgate.report import runinfo

_FIELDS = {f.name for f in dataclasses.fields(Outcome)}


@contextlib.contextmanager
def rewrite_on_stop(
    options: Options,
    planned: Callable[[], list[str]],
    *,
    gate: bool,
    also_stopped: Callable[[], list[str]] = list,
) -> Iterator[None]:
    """While the block runs, a stop (SIGINT, SIGTERM, SIGHUP) rewrites the page of the run
    whose stages ``planned()`` names (in order) before the stop goes on. ``also_stopped()``:
    stages the stop ended while they ran that have already recorded an outcome (a gate's
    background stages, whose commands the stop ended before the page is rewritten)."""

    def stopped(signame: str) -> None:
        write_stopped(options, planned(), signame, gate=gate, also_stopped=also_stopped())

    with command.last_words(lambda signum: stopped(signal.Signals(signum).name)):
        try:
            yield
        except KeyboardInterrupt:
            stopped("SIGINT")
            raise


def write_stopped(
    options: Options,
    planned: list[str],
    signame: str,
    *,
    gate: bool,
    also_stopped: list[str] | tuple[str, ...] = (),
) -> None:
    """Mark the stages still running (and ``also_stopped``) INCOMPLETE; a gate's table and
    gate.json; the report."""
    folder = options.out_dir / "stages"
    rows = {name: _read(folder / f"{name}.json") for name in planned}
    rows = {name: row for name, row in rows.items() if row is not None}
    stopped = [
        name for name, row in rows.items()
        if row.get("status") == runinfo.RUNNING or name in also_stopped
    ]  # fmt: skip
    for name in stopped:
        rows[name] = stop_running(options, name, rows[name], signame)
    never = [name for name in planned if name not in rows]
    if gate:
        outcomes = [Outcome(**{k: v for k, v in r.items() if k in _FIELDS}) for r in rows.values()]
        options.out_dir.mkdir(parents=True, exist_ok=True)
        (options.out_dir / "gate.json").write_text(
            json.dumps([o.to_json() for o in outcomes], indent=2) + "\n"
        )
        print(summary_table(outcomes), flush=True)
        during = f" while {', '.join(stopped)} ran" if stopped else ""
        left = f"; never started: {', '.join(never)}" if never else ""
        print(f"gate INCOMPLETE — stopped by {signame}{during}{left}", flush=True)
    refresh_report(options.out_dir)


def stop_running(options: Options, name: str, marker: dict, signame: str) -> dict:
    """The outcome of a stage a signal stopped: INCOMPLETE, its tests so far, kept."""
    reason = f"stopped by {signame} while it ran: {_tests_so_far(options, name)}"
    outcome = Outcome(stage=name, status="incomplete", reason=reason, seconds=_since(marker))
    record(outcome, options)
    command.say(f"rankgate: stage {name} INCOMPLETE — {reason}")
    return outcome.to_json()


def _tests_so_far(options: Options, name: str) -> str:
    """``5 tests ended (5 passed); test_x.py::test_long was running`` from the stage's
    JUnit (pytest writes it as it stops); "no test ended" without one."""
    # Imported here, as in record(): the report's modules are heavy for every nox session.
    from rankgate.report.junitfile import ReportInputError
    from rankgate.report.results import count, read_results

    junit = options.out_dir / "junit" / f"{name}.xml"
    try:
        results = [r for g in read_results([junit]) for r in g.results] if junit.exists() else []
    except ReportInputError:
        results = []
    ended = [r for r in results if not r.interrupted and r.outcome != "not run"]
    running = [r.id for r in results if r.interrupted]
    counted = ", ".join(f"{n} {k}" for k, n in count(ended).items() if n and k != "tests")
    text = f"{len(ended)} tests ended ({counted})" if ended else "no test ended"
    return text + (f"; {', '.join(running)} was running" if running else "")


def _read(path: Path) -> dict | None:
    try:
        row = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) and "status" in row else None


def _since(marker: dict) -> float:
    """Seconds since the stage's running mark was written (0 when it has no time); a stage
    that recorded its outcome as the stop ended it: the seconds it recorded."""
    if isinstance(marker.get("seconds"), (int, float)):
        return float(marker["seconds"])
    try:
        started = datetime.strptime(marker["started"], "%Y-%m-%dT%H:%M:%SZ")
    except (KeyError, TypeError, ValueError):
        return 0.0
    since = datetime.now(timezone.utc) - started.replace(tzinfo=timezone.utc)
    return max(0.0, since.total_seconds())
