"""Merge per-rank JUnit XML files into one rank-aware verdict (``rankgate merge-junit``).

In the harness's in-place mode (pytest started by torchrun, srun or mpirun) every rank
writes its own JUnit file, ``junit.rank<r>.xml``. :func:`merge_junit` reads them and
returns a :class:`MergedReport` with one test case per test id (classname + name):

=========  ==================================================================
verdict    when
=========  ==================================================================
failed     some rank failed
error      no rank failed, but some rank errored, or the test is missing on
           some ranks, or the ranks disagree (passed on some, skipped on others)
not run    no rank failed or errored, but some rank never started it (a rank
           stopped an in-place run first; ranks without the test died before
           that); red like failed and error
skipped,   every rank skipped it, xfailed it, or xpassed it (non-strict); an
xfailed,   xfail-marked test that failed on some ranks and passed on the others
xpassed    (strict or not) is xfailed: it failed as a whole
passed     every rank passed it
=========  ==================================================================

Each verdict is counted apart. A verdict other than passed carries a message naming
what each rank did in rankgate's one wording ("rank 1 failed; ranks 0, 2 passed",
:mod:`rankgate.harness.verdict_lines`) and the failing ranks' own texts. Each rank's
system-out and system-err are kept, every line prefixed with ``[rank r]``.

Files are read by :mod:`rankgate.report.junitfile` (which says where a case's rank
comes from); unreadable input raises :class:`ReportInputError` naming the file.

A file that says its run was interrupted (the ``rankgate.interrupted`` property, or
pytest's nameless ``<testcase/>`` of a test cut short), or that holds no test, makes the
merged run INCOMPLETE: never a pass, whatever its tests say.

A folder may hold files of several in-place runs (a killed run's results files beside
an earlier run's JUnit files): one run's files are read, the newest or the one named
(:mod:`rankgate.report.runs`). A merged file keeps the run id, and the tests a signal
stopped (``rankgate.interrupted_test``), so a report on it says what one on the folder
says. The command line is :mod:`rankgate.report.merge_command`'s.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rankgate.harness import crashrecord, divergence, verdict_lines
from rankgate.harness.attempts import (
    ATTEMPTS_PROPERTY,
    FLAKY_PROPERTY,
    Attempt,
    decode,
    encode,
)
from rankgate.harness.quarantine import STALE_PROPERTY
from rankgate.harness.rankfiles import RUN_ID_PROPERTY, ledger_path, read_ledger
from rankgate.harness.verdict_lines import (
    BACKEND_PROPERTY,
    INTERRUPTED_PREFIX,
    INTERRUPTED_PROPERTY,
    INTERRUPTED_TEST_PROPERTY,
    NOT_RUN_PREFIX,
    RANKS_PROPERTY,
    WORLD_PROPERTY,
)
from rankgate.report.junitfile import (
    GREEN,
    OUTCOMES,
    XPASS_MESSAGE,
    CaseResult,
    JUnitFile,
    ReportInputError,
    join_texts,
    not_run_reason,
    read_junit,  # noqa: F401  (part of this module's API)
)
from rankgate.report.rankresults import crashed_in, expand, read_any
from rankgate.report.runs import pick_run


@dataclass(frozen=True, slots=True)
class MergedTest:
    """One test id's verdict over all ranks."""

    classname: str
    name: str
    verdict: str
    message: str
    """What each rank did, when the verdict is not passed (the reason, when skipped)."""
    details: str
    """The failing, erroring or disagreeing ranks' own texts, each headed by its rank."""
    results: dict[int, CaseResult]
    missing: tuple[int, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    """Where it ran when runs were merged (``shard``, ``node``, ``job``), written as properties."""
    diverged: tuple[int, ...] = ()
    """Ranks that passed but that the ledgers single out: worded "diverged", failing."""

    @property
    def attempts(self) -> list[Attempt]:
        """Every attempt of a test run more than once (``--rankgate-reruns``), as the
        ranks recorded it ([] for a test run once)."""
        return attempts_recorded(self.results.values())

    @property
    def flaky(self) -> str:
        """``pass`` or ``fail`` (the policy it ran under) for a test that failed and then
        passed a rerun; "" otherwise."""
        return next((p for res in self.results.values() if (p := flaky_of(res))), "")

    @property
    def test_id(self) -> str:
        return f"{self.classname}::{self.name}" if self.classname else self.name

    @property
    def node_id(self) -> str:
        """pytest's node id where a rank recorded it (in place), else ``test_id``: the
        name to paste back into pytest."""
        recorded = (res.node_id for _, res in sorted(self.results.items()))
        return next((n for n in recorded if n), self.test_id)

    @property
    def failing_ranks(self) -> tuple[int, ...]:
        """Ranks that failed, errored, or lack the test."""
        bad = [
            r for r, res in self.results.items() if res.outcome in ("failed", "error", "not run")
        ]
        return tuple(sorted([*bad, *self.missing, *self.diverged]))

    @property
    def rank_outcomes(self) -> dict[int, str]:
        """Each expected rank's outcome, as the message words it (a death inside the test
        is ``crashed``, an in-place hang ``hung``); ``missing`` for a rank without it."""
        outcomes = {r: worded_outcome(res.outcome, res) for r, res in self.results.items()}
        outcomes.update(dict.fromkeys(self.missing, "missing"))
        outcomes.update(dict.fromkeys(self.diverged, "diverged"))
        return dict(sorted(outcomes.items()))


@dataclass(slots=True)
class MergedReport:
    """The merged verdicts of one multi-rank run."""

    tests: list[MergedTest]
    ranks: tuple[int, ...]
    """Ranks that contributed results."""
    world_size: int
    sources: tuple[str, ...]
    suite_name: str = "pytest"
    system_out: str = ""
    system_err: str = ""
    incomplete: tuple[str, ...] = ()
    """Why the run did not finish, per file that says so (a signal, no test in it):
    such a run is never a pass, whatever its tests say."""
    labels: tuple[tuple[str, str], ...] = ()
    """The suite's own properties beyond ranks and sources (one ``shard`` per shard merged)."""
    interrupted_tests: tuple[str, ...] = ()
    """The tests a signal stopped (``classname::name``): the report counts them as the
    run's interruption, not as failures of their own."""
    run_id: str = ""
    """The in-place launch its files came from ("" when they name none)."""
    other_runs: str = ""
    """One line naming the files of other runs in the folder that were left out."""
    stale_quarantine: tuple[str, ...] = ()
    """Quarantine entries that matched no test (rank 0 in place records them), kept."""

    @property
    def counts(self) -> dict[str, int]:
        counts = {"tests": len(self.tests), **dict.fromkeys(OUTCOMES, 0)}
        for test in self.tests:
            counts[test.verdict] += 1
        return counts

    @property
    def verdicts(self) -> dict[str, str]:
        return {test.test_id: test.verdict for test in self.tests}

    @property
    def flaky(self) -> list[MergedTest]:
        """The tests that failed and then passed a rerun (whatever the policy made them)."""
        return [test for test in self.tests if test.flaky]

    @property
    def ok(self) -> bool:
        return not self.incomplete and all(test.verdict in GREEN for test in self.tests)

    def summary_line(self) -> str:
        c = self.counts
        outcomes = ", ".join(f"{c[o]} {o}" for o in OUTCOMES)
        ranks = _ranks_text(self.ranks)
        tests = verdict_lines.count(c["tests"], "test")
        line = f"{tests} on {ranks} of world {self.world_size}: {outcomes}"
        if self.flaky:
            line += f"; {len(self.flaky)} flaky (failed, then passed a rerun)"
        return f"{self.incomplete_line()}; {line}" if self.incomplete else line

    def incomplete_line(self) -> str:
        """'INCOMPLETE: <why>' (the first file's reason, and how many more say so)."""
        more = len(self.incomplete) - 1
        return f"INCOMPLETE: {self.incomplete[0]}" + (f" (and {more} more)" if more else "")

    def to_dict(self) -> dict:
        """A JSON-ready form: counts, and each test's verdict and per-rank outcomes."""
        return {
            "ok": self.ok,
            "incomplete": list(self.incomplete),
            "world_size": self.world_size,
            "ranks": list(self.ranks),
            "counts": self.counts,
            "sources": list(self.sources),
            **({"run_id": self.run_id} if self.run_id else {}),
            **({"other_runs": self.other_runs} if self.other_runs else {}),
            **({"labels": [list(pair) for pair in self.labels]} if self.labels else {}),
            "tests": [
                {
                    "id": t.test_id,
                    "nodeid": t.node_id,
                    "verdict": t.verdict,
                    "message": t.message,
                    "ranks": {str(r): o for r, o in t.rank_outcomes.items()},
                    **(
                        {"flaky": t.flaky, "attempts": [a.to_json() for a in t.attempts]}
                        if t.attempts
                        else {}
                    ),
                    **({"labels": dict(t.labels)} if t.labels else {}),
                }
                for t in self.tests
            ],
        }

    def write_xml(self, path: str | Path) -> None:
        """Write one JUnit file holding the merged verdicts."""
        c = self.counts
        totals = {
            "tests": str(c["tests"]),
            "failures": str(c["failed"]),
            "errors": str(c["error"] + c["not run"]),
            "skipped": str(c["skipped"] + c["xfailed"] + c["xpassed"]),
            "time": f"{sum(_test_time(t) for t in self.tests):.3f}",
        }
        root = ET.Element("testsuites", {"name": "rankgate merge-junit", **totals})
        suite = ET.SubElement(root, "testsuite", {"name": self.suite_name, **totals})
        _add_properties(
            suite,
            [("ranks", _csv(self.ranks)), ("world_size", str(self.world_size))]
            + [("source", s) for s in self.sources]
            + [(INTERRUPTED_PROPERTY, why) for why in self.incomplete]
            + [(INTERRUPTED_TEST_PROPERTY, test) for test in self.interrupted_tests]
            + ([(RUN_ID_PROPERTY, self.run_id)] if self.run_id else [])
            + [(STALE_PROPERTY, found) for found in self.stale_quarantine]
            + list(self.labels),
        )
        for test in self.tests:
            _write_case(suite, test)
        _add_text(suite, "system-out", self.system_out)
        _add_text(suite, "system-err", self.system_err)
        ET.indent(root)
        ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


# --------------------------------------------------------------------------- merging


def merge_junit(
    paths: Iterable[str | Path], world_size: int | None = None, run_id: str | None = None
) -> MergedReport:
    """Read per-rank JUnit files and merge them; see the module docstring for the rules.

    ``world_size`` names the ranks expected (0..world_size-1); by default it comes from
    a ``world_size`` property of the files, else from the ranks seen. A rank with no
    file at all becomes one errored test, ``rankgate.merge::missing_ranks``; a rank
    that left only its results file (it died) is read from that file
    (:mod:`rankgate.report.rankresults`), its last test crashed. Of files of several
    runs, those of run ``run_id`` are read, else the newest run's
    (:mod:`rankgate.report.runs`).
    """
    files = [read_any(p) for p in expand(paths)]
    return merge_files(files, world_size, run_id)


def merge_files(
    files: Sequence[JUnitFile], world_size: int | None = None, run_id: str | None = None
) -> MergedReport:
    """:func:`merge_junit` on files already read."""
    if not files:
        raise ReportInputError("no JUnit files given")
    picked = pick_run(files, run_id)
    files = picked.files
    holder: dict[int, str] = {}
    for f in files:
        if f.rank is not None and f.rank in holder:
            raise ReportInputError(f"{holder[f.rank]} and {f.path} both hold rank {f.rank}")
        if f.rank is not None:
            holder[f.rank] = f.path
        if any(case.rank is None for case in f.cases) or (f.rank is None and not f.cases):
            raise ReportInputError(
                f"{f.path}: cannot tell its rank; name it junit.rank<r>.xml "
                "or give its testsuite a 'rank' property"
            )
    world_size = world_size or _world_from_files(files)
    files = sorted(files, key=lambda f: (f.rank is None, f.rank or 0))
    per_test: dict[tuple[str, str], dict[int, CaseResult]] = {}
    for f in files:
        for case in f.cases:
            by_rank = per_test.setdefault((case.classname, case.name), {})
            prev = by_rank.get(case.rank)
            by_rank[case.rank] = case if prev is None else prev.combine(case)
    ranks = tuple(sorted({r for by_rank in per_test.values() for r in by_rank} | set(holder)))
    expected = tuple(range(world_size)) if world_size else ranks
    beyond = [r for r in ranks if r not in expected]
    if beyond:
        raise ReportInputError(
            f"results for {_ranks_text(beyond)} but the world size is {world_size} "
            f"(ranks 0..{world_size - 1}); pass the right --world"
        )
    ledgers = {
        f.rank: read_ledger(ledger_path(f.path), f.run_id) for f in files if f.rank is not None
    }
    tests = [
        _merge_test(
            cn,
            n,
            by_rank,
            ranks_that_ran(by_rank.values()) or expected,
            {r: found.get((cn, n)) for r, found in ledgers.items()},
        )
        for (cn, n), by_rank in per_test.items()
    ]
    # In place the ranks share the tests out: a rank whose share was empty holds none.
    shared = {r for by_rank in per_test.values() for r in ranks_that_ran(by_rank.values())}
    absent = [r for r in expected if r not in ranks]
    if absent:
        tests.insert(0, _missing_ranks_test(absent, len(expected)))
    names = {n for f in files for n in f.suite_names if n}
    return MergedReport(
        tests=tests,
        ranks=ranks,
        world_size=len(expected),
        sources=tuple(f.path for f in files),
        suite_name=names.pop() if len(names) == 1 else "rankgate-merged",
        system_out=_prefixed((f.rank, f.system_out) for f in files),
        system_err=_prefixed((f.rank, f.system_err) for f in files),
        incomplete=tuple(
            _incomplete(f)
            for f in files
            if f.incomplete and (f.interrupted or not shared or f.rank in shared)
        ),
        interrupted_tests=tuple(dict.fromkeys(t for f in files for t in f.interrupted_tests)),
        run_id=picked.run_id,
        other_runs=picked.other_runs,
        stale_quarantine=tuple(dict.fromkeys(v for f in files for v in f.stale_quarantine)),
    )


def ranks_that_ran(cases: Iterable[CaseResult]) -> tuple[int, ...]:
    """The global ranks a case says ran it in place (``rankgate.ranks``: a sub-world's,
    or a plain test's one rank); () where no case says (every rank ran it)."""
    for case in cases:
        said = dict(case.properties).get(RANKS_PROPERTY)
        if said:
            try:
                return tuple(int(r) for r in said.split(","))
            except ValueError:
                raise ReportInputError(
                    f"{case.source}: {case.test_id}: {RANKS_PROPERTY} is {said!r}, not ranks"
                ) from None
    return ()


def _incomplete(f: JUnitFile) -> str:
    """One file's reason, naming its rank unless the reason does already."""
    if f.rank is None or f.interrupted.startswith(f"rank {f.rank} "):
        return f.incomplete
    return f"rank {f.rank}: {f.incomplete}"


def _world_from_files(files: Sequence[JUnitFile]) -> int | None:
    worlds = {f.world_size for f in files if f.world_size is not None}
    if len(worlds) > 1:
        raise ReportInputError(f"the files disagree on world_size: {sorted(worlds)}")
    return worlds.pop() if worlds else None


def flaky_of(case: CaseResult) -> str:
    """The flaky policy a case recorded ("" for none)."""
    return dict(case.properties).get(FLAKY_PROPERTY, "")


def attempts_recorded(cases: Iterable[CaseResult]) -> list[Attempt]:
    """The attempts the first case that recorded them holds (every rank records the same)."""
    for case in cases:
        said = dict(case.properties).get(ATTEMPTS_PROPERTY)
        if said:
            return decode(said)
    return []


RERUN_PROPERTIES = (ATTEMPTS_PROPERTY, FLAKY_PROPERTY, RANKS_PROPERTY)
"""Written once per merged case, not once per rank."""


def worded_outcome(outcome: str, result: CaseResult | None) -> str:
    """A failure that is an in-place hang's record, a signal's stop of the run, or a
    rank's death inside the test (its results file stops there), is worded as what it was."""
    if outcome != "failed" or result is None:
        return outcome
    if verdict_lines.hung_headline(result.message):
        return "hung"
    if result.message.startswith(INTERRUPTED_PREFIX):
        return "interrupted"
    return "crashed" if crashed_in(result.message) else outcome


def _merge_test(
    classname: str,
    name: str,
    by_rank: dict[int, CaseResult],
    expected: Sequence[int],
    ledgers: dict[int, list | None] | None = None,
) -> MergedTest:
    results = dict(sorted(by_rank.items()))
    missing = tuple(r for r in expected if r not in results)
    outcomes = {r: res.outcome for r, res in results.items()}
    outcomes.update(dict.fromkeys(missing, "missing"))
    # Beside a rank that xfailed it, a rank that passed the test passed it under its xfail
    # marker: pytest's JUnit writes such a pass as a plain one (not strict) or a failure.
    xpasses = {
        r: "xpassed" for r, res in results.items()
        if res.outcome == "passed"
        or (res.outcome == "failed" and verdict_lines.is_strict_xpass(res.message))
    }  # fmt: skip
    as_xfail = {**outcomes, **xpasses}
    if "xpassed" in as_xfail.values() and verdict_lines.xfailed_as_one(as_xfail):
        return _expected_failure(classname, name, as_xfail, results)
    kinds = set(outcomes.values())
    failed = {r: res.time for r, res in results.items() if res.outcome == "failed"}
    worded = {r: worded_outcome(o, results.get(r)) for r, o in outcomes.items()}
    hung = {r: res for r, res in results.items() if worded[r] == "hung"}
    cause = next((c for res in hung.values() if (c := verdict_lines.cause_in(res.message))), "")
    diverged = divergence.find(ledgers or {})
    if diverged is not None and not cause:  # what a hung rank said stands: rank 0 showed it
        cause = divergence.cause_of(diverged, ledgers)
    if not cause:  # 'rank 1 crashed at x.py:12; rank 0 was in all_reduce ...', as the pool
        cause = crashrecord.cause(crashrecord.places_in(results), ledgers or {})
    # A rank the ledgers (or the hung rank's cause) single out never "passed".
    worded = divergence.worded(worded, diverged)
    blamed = divergence.blamed_in(cause)
    worded = {r: "diverged" if r in blamed and w == "passed" else w for r, w in worded.items()}
    if "diverged" in worded.values():
        kinds.add("failed")
    failed = {r: t for r, t in failed.items() if worded[r] == "failed"}
    what = verdict_lines.with_cause(
        verdict_lines.outcomes_line(worded, first=verdict_lines.first_failed(failed)), cause
    )
    if "failed" in kinds:
        verdict, message = "failed", what
    elif "error" in kinds or (missing and "not run" not in kinds):
        verdict, message = "error", what
    elif "not run" in kinds:  # a rank without it died before the run was stopped
        why = next((r for res in results.values() if (r := not_run_reason(res.message))), "")
        notes = {"not run": why} if why else None
        verdict = "not run"
        message = verdict_lines.outcomes_line(
            worded, first=verdict_lines.first_failed(failed), notes=notes
        )
    elif len(kinds) > 1:
        verdict, message = "error", f"ranks disagree: {what}"
    elif kinds & {"skipped", "xfailed"}:
        reasons = list(dict.fromkeys(res.message for res in results.values()))
        verdict = kinds.pop()
        message = (
            reasons[0]
            if len(reasons) == 1
            else "; ".join(f"rank {r}: {res.message}" for r, res in results.items())
        )
    else:
        verdict, message = kinds.pop(), ""
    bad = {r: res for r, res in results.items() if res.outcome in ("failed", "error", "not run")}
    disagree = verdict == "error" and not bad and not missing
    shown = results if disagree else bad  # a disagreement shows what every rank did
    details = "\n\n".join(
        f"----- rank {r}: {res.outcome}"  # one line: mergedcase reads each rank's text back
        + (f": {res.message.splitlines()[0]}" if res.message.strip() else "")
        + (f"\n{res.text.rstrip()}" if res.text.strip() else "")
        for r, res in shown.items()
    )
    if missing:
        details = join_texts(details, f"----- {_ranks_text(missing)}: no result for this test")
    if diverged is not None:  # the ledgers side by side around where they part
        details = join_texts(divergence.side_by_side(ledgers or {}, diverged), details)
    diverged = tuple(r for r, w in worded.items() if w == "diverged")
    return MergedTest(
        classname, name, verdict, message, details, results, missing, diverged=diverged
    )


def _expected_failure(
    classname: str, name: str, outcomes: dict[int, str], results: dict[int, CaseResult]
) -> MergedTest:
    """An xfail-marked test that failed on some ranks and passed on the others: xfailed."""
    reason = next(res.message for r, res in results.items() if outcomes[r] == "xfailed")
    message = f"{reason} ({verdict_lines.outcomes_line(outcomes)})"
    details = "\n\n".join(
        f"----- rank {r}: {outcomes[r]}" + (f"\n{res.text.rstrip()}" if res.text.strip() else "")
        for r, res in results.items()
        if outcomes[r] == "xfailed"
    )
    return MergedTest(classname, name, "xfailed", message, details, results, ())


def _missing_ranks_test(absent: Sequence[int], world: int) -> MergedTest:
    message = f"no JUnit file for {_ranks_text(absent)} of world {world}"
    details = (
        f"{message}: those ranks wrote no results (crashed, killed, or never started); "
        "look for their logs"
    )
    return MergedTest("rankgate.merge", "missing_ranks", "error", message, details, {}, ())


# --------------------------------------------------------------------------- writing


def _write_case(suite: ET.Element, test: MergedTest) -> None:
    attrs = {"classname": test.classname, "name": test.name, "time": f"{_test_time(test):.3f}"}
    case = ET.SubElement(suite, "testcase", attrs)
    props = [("ranks", _csv(test.results)), ("rank_outcomes", _outcomes_csv(test))]
    if test.failing_ranks:
        props.append(("failing_ranks", _csv(test.failing_ranks)))
    if test.attempts:
        props.append((ATTEMPTS_PROPERTY, encode(test.attempts)))
    if test.flaky:
        props.append((FLAKY_PROPERTY, test.flaky))
    props += [
        (f"rank{r}.{k}", v)
        for r, res in test.results.items()
        for k, v in res.properties
        if k not in RERUN_PROPERTIES
    ]
    props += list(test.labels)
    for name in (WORLD_PROPERTY, BACKEND_PROPERTY):  # the pool's names, where the ranks agree
        said = {dict(res.properties).get(name) for res in test.results.values()} - {None}
        if len(said) == 1:
            props.append((name, said.pop()))
    _add_properties(case, props)
    # The way pytest writes each outcome, so that merged files read back the same.
    tag, attrs = {
        "failed": ("failure", {"message": test.message}),
        "error": ("error", {"message": test.message}),
        "not run": ("error", {"message": NOT_RUN_PREFIX + test.message}),
        "skipped": ("skipped", {"message": test.message}),
        "xfailed": ("skipped", {"type": "pytest.xfail", "message": test.message}),
        "xpassed": ("skipped", {"message": XPASS_MESSAGE}),
    }.get(test.verdict, (None, {}))
    if tag:
        result = ET.SubElement(case, tag, attrs)
        result.text = test.details or None
    _add_text(case, "system-out", _prefixed((r, res.system_out) for r, res in test.results.items()))
    _add_text(case, "system-err", _prefixed((r, res.system_err) for r, res in test.results.items()))


def _add_properties(element: ET.Element, props: list[tuple[str, str]]) -> None:
    if props:
        holder = ET.SubElement(element, "properties")
        for name, value in props:
            ET.SubElement(holder, "property", {"name": name, "value": value})


def _add_text(element: ET.Element, tag: str, text: str) -> None:
    if text:
        ET.SubElement(element, tag).text = text


def _test_time(test: MergedTest) -> float:
    # Ranks run side by side: the test took as long as its slowest rank.
    return max((res.time for res in test.results.values()), default=0.0)


def _prefixed(texts: Iterable[tuple[int | None, str]]) -> str:
    lines = []
    for rank, text in texts:
        prefix = "" if rank is None else f"[rank {rank}] "
        lines.extend(prefix + line for line in text.rstrip("\n").splitlines())
    return "\n".join(lines) + "\n" if lines else ""


def _outcomes_csv(test: MergedTest) -> str:
    return ",".join(f"{r}={o}" for r, o in test.rank_outcomes.items())


def _csv(ranks: Iterable[int]) -> str:
    return ",".join(str(r) for r in ranks)


def _ranks_text(ranks: Sequence[int]) -> str:
    return verdict_lines.ranks(ranks)
