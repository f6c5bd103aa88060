"""Every test of a run's JUnit files, with one of seven outcomes.

:func:`read_results` reads JUnit files as :mod:`rankgate.report.json_summary` does: per-rank
files (in-place mode, dispatched jobs) merged per directory with the rules of
:mod:`rankgate.report.junit`, any other file as it is. Each test becomes one
:class:`TestResult` whose outcome is one of :data:`OUTCOMES`:

- ``xfailed``: an expected failure (pytest writes ``<skipped type="pytest.xfail">``);
- ``xpassed``: an xfail-marked test that passed (the ``rankgate.outcome`` property of
  :mod:`rankgate.report.outcome_plugin`; a strict one is already a failure);
- ``skipped``, ``failed``, ``error``, ``passed`` as JUnit says;
- ``not run``: a test a stopped run never started (an in-place run a rank stopped, or an
  interrupted one; its JUnit message begins with ``not run: ``). Red, but counted apart
  from errors, as merge-junit counts it.

A group whose files say the run was interrupted, or that hold no test, carries why
(``Group.incomplete``): such a run is never a pass.

A pool run's JUnit carries each rank's outcome as ``rankgate.rank<r>.outcome``
properties and the failing ranks as ``rankgate.failing_ranks``; a file written by
``merge-junit`` carries ``rank_outcomes`` and ``failing_ranks``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rankgate.harness.attempts import Attempt
from rankgate.harness.quarantine import FAILURE_PROPERTY, QUARANTINE_PROPERTY, read_property
from rankgate.report.failures import read_by_rank
from rankgate.report.junit import MergedTest, attempts_recorded, flaky_of, merge_files
from rankgate.report.junitfile import CaseResult, JUnitFile, not_run_reason
from rankgate.report.outcome_plugin import OUTCOME_PROPERTY
from rankgate.report.runs import with_run

OUTCOMES = ("passed", "failed", "error", "not run", "skipped", "xfailed", "xpassed")
"""The outcomes a report counts apart, in the order it shows them."""
BAD_OUTCOMES = ("failed", "error")
"""Tests that ran and failed; ``not run`` is red too, and listed apart."""
XFAIL_TYPE = "pytest.xfail"


@dataclass(frozen=True, slots=True)
class TestResult:
    """One test of one JUnit source."""

    __test__ = False  # not a pytest test class, whatever its name says

    id: str
    outcome: str
    """One of :data:`OUTCOMES`."""
    source: str
    """The JUnit file, or the directory of per-rank files, it came from."""
    seconds: float = 0.0
    """How long it took (a multi-rank test: its slowest rank)."""
    reason: str = ""
    """Why it was skipped or expected to fail; a failure's message."""
    ranks: dict[int, str] | None = None
    """Each rank's outcome; None for a test that ran without ranks."""
    failing_ranks: tuple[int, ...] | None = None
    interrupted: bool = False
    """The test a signal stopped (its files' ``rankgate.interrupted_test``)."""
    attempts: tuple[Attempt, ...] = ()
    """Every attempt of a test run more than once (``--rankgate-reruns``)."""
    flaky: str = ""
    """``pass`` or ``fail``: the flaky policy of a test that failed, then passed a rerun."""
    quarantine: dict | None = None
    """For a quarantined test: reason, issue, streak (passes in a row before this run)
    and needed (``rankgate.harness.quarantine``)."""

    @property
    def stage(self) -> str:
        """The stage that ran it, from the file's name (junit/<stage>.xml, junit/<stage>/)."""
        path = Path(self.source)
        return path.stem if path.suffix == ".xml" else path.name


@dataclass(slots=True)
class Group:
    """The tests of one source: a JUnit file, or a directory of per-rank files."""

    source: str
    files: list[str]
    ranks: list[int] | None
    results: list[TestResult] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    """Why its run did not finish (a signal, no test in it); [] when it did."""
    shards: list[str] = field(default_factory=list)
    """A sharded run's shards: where each job ran and how it ended."""
    run_id: str = ""
    """The in-place launch its per-rank files came from."""
    other_runs: str = ""
    """One line naming the other runs' files in its folder that were left out."""
    stale_quarantine: list[str] = field(default_factory=list)
    """Quarantine entries its run found matching no test (``rankgate.quarantine_stale``)."""

    @property
    def totals(self) -> dict[str, int]:
        return count(self.results)


def count(results: Iterable[TestResult]) -> dict[str, int]:
    """``{"tests": n, "passed": ..., "xpassed": ...}``: every outcome, zeros included."""
    totals = {"tests": 0, **dict.fromkeys(OUTCOMES, 0)}
    for r in results:
        totals["tests"] += 1
        totals[r.outcome] += 1
    return totals


def read_results(junit_paths: Iterable[str | Path], run_id: str | None = None) -> list[Group]:
    """One group per plain JUnit file and per directory of per-rank files (of one run:
    ``run_id`` where the directory holds it, else its newest, :mod:`rankgate.report.runs`)."""
    plain, per_rank = read_by_rank(junit_paths)
    groups = [_plain_group(f) for f in plain]
    for directory, files in per_rank.items():
        report = merge_files(files, run_id=with_run(files, run_id))
        stopped = set(report.interrupted_tests)
        groups.append(
            Group(
                source=directory,
                files=list(report.sources),
                ranks=list(report.ranks),
                results=[_from_merged(directory, t, stopped) for t in report.tests],
                incomplete=list(report.incomplete),
                run_id=report.run_id,
                other_runs=report.other_runs,
                stale_quarantine=list(report.stale_quarantine),
            )
        )
    return groups


def _plain_group(f: JUnitFile) -> Group:
    by_id: dict[str, CaseResult] = {}
    for case in f.cases:
        prev = by_id.get(case.test_id)
        by_id[case.test_id] = case if prev is None else prev.combine(case)
    stopped = set(f.interrupted_tests)
    return Group(source=f.path, files=[f.path], ranks=None,
                 results=[_from_case(f.path, c, stopped) for c in by_id.values()],
                 incomplete=[f.incomplete] if f.incomplete else [],
                 shards=list(f.shards), stale_quarantine=list(f.stale_quarantine))  # fmt: skip


def case_outcome(case: CaseResult) -> str:
    """A case's outcome among :data:`OUTCOMES`."""
    if case.outcome == "skipped" and case.result_type == XFAIL_TYPE:
        return "xfailed"
    if case.outcome == "passed" and (OUTCOME_PROPERTY, "xpassed") in case.properties:
        return "xpassed"
    if case.outcome not in OUTCOMES:
        return "error"
    return case.outcome


def _from_case(source: str, case: CaseResult, stopped: set[str] = frozenset()) -> TestResult:
    props = dict(case.properties)
    ranks = {
        int(name.split(".")[1][4:]): value
        for name, value in case.properties
        if name.startswith("rankgate.rank") and name.endswith(".outcome")
    }
    bad = _csv_ints(props.get("rankgate.failing_ranks"))
    if not ranks and props.get("rank_outcomes"):  # written by merge-junit
        pairs = (p.partition("=") for p in props["rank_outcomes"].split(",") if p)
        ranks = {int(r): o for r, _, o in pairs}
        bad = _csv_ints(props.get("failing_ranks"))
    if ranks and not bad:
        good = ("passed", "skipped", "xfailed")
        bad = tuple(r for r, o in sorted(ranks.items()) if o not in good)
    outcome = case_outcome(case)
    reason = not_run_reason(case.message) if outcome == "not run" else ""
    return TestResult(
        id=case.test_id,
        outcome=outcome,
        source=source,
        seconds=case.time,
        reason=reason or _first_line(case.message),
        ranks=dict(sorted(ranks.items())) or None,
        failing_ranks=(bad if outcome in BAD_OUTCOMES else ()) if ranks else None,
        interrupted=case.test_id in stopped,
        attempts=tuple(attempts_recorded([case])),
        flaky=flaky_of(case),
        quarantine=quarantine_of([case]),
    )


def _from_merged(source: str, test: MergedTest, stopped: set[str] = frozenset()) -> TestResult:
    results = list(test.results.values())
    outcome = test.verdict if test.verdict in OUTCOMES else "error"
    if results and all(case_outcome(r) == "xfailed" for r in results) and outcome == "skipped":
        outcome = "xfailed"
    if results and all(case_outcome(r) == "xpassed" for r in results) and outcome == "passed":
        outcome = "xpassed"
    return TestResult(
        id=test.test_id,
        outcome=outcome,
        source=source,
        seconds=max((r.time for r in results), default=0.0),
        reason=_first_line(test.message),
        ranks=test.rank_outcomes,
        failing_ranks=test.failing_ranks if outcome in BAD_OUTCOMES else (),
        interrupted=test.test_id in stopped,
        attempts=tuple(test.attempts),
        flaky=test.flaky,
        quarantine=quarantine_of(test.results.values()),
    )


def quarantine_of(cases: Iterable[CaseResult]) -> dict | None:
    """The quarantine the first case that records one holds (merge-junit writes each
    rank's as ``rank<r>.rankgate.quarantined``)."""
    cases = list(cases)
    for case in cases:
        for name, value in case.properties:
            if name == QUARANTINE_PROPERTY or name.endswith("." + QUARANTINE_PROPERTY):
                found = read_property(value)
                if found is not None:  # the failure: of the first rank that failed
                    failure = next((f for c in cases if (f := _property(c, FAILURE_PROPERTY))), "")
                    return {**found, "failure": failure} if failure else found
    return None


def _property(case: CaseResult, wanted: str) -> str:
    """A case's property, or a merged case's first rank's (``rank<r>.<name>``)."""
    return next((v for k, v in case.properties if k == wanted or k.endswith("." + wanted)), "")


def _csv_ints(value: str | None) -> tuple[int, ...]:
    return tuple(int(v) for v in (value or "").split(",") if v.strip())


def _first_line(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0] if lines else ""
