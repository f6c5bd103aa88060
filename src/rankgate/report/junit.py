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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rankgate.harness import verdict_lines
from rankgate.harness.rankfiles import ledger_path, plan_path, read_ledger, read_plan
from rankgate.harness.verdict_lines import NODE_ID_PROPERTY, NOT_RUN_PREFIX, RANKS_PROPERTY
from rankgate.report import mergedxml
from rankgate.report.junitfile import (
    GREEN,
    OUTCOMES,
    CaseResult,
    JUnitFile,
    ReportInputError,
    read_junit,  # noqa: F401  (part of this module's API)
)
from rankgate.report.mergedtest import (  # noqa: F401  (part of this module's API)
    MergedTest,
    attempts_recorded,
    flaky_of,
    merge_test,
    missing_ranks_test,
    worded_outcome,
)
from rankgate.report.rankresults import expand, read_any
from rankgate.report.runs import pick_run


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
        ranks = verdict_lines.ranks(self.ranks)
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
        """Write one JUnit file holding the merged verdicts (:mod:`.mergedxml`)."""
        mergedxml.write_xml(self, path)


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
    files = sorted(picked.files, key=lambda f: (f.rank is None, f.rank or 0))
    holders = _rank_holders(files)
    world_size = world_size or _world_from_files(files)
    per_test = _cases_by_test(files)
    ranks = tuple(sorted({r for by_rank in per_test.values() for r in by_rank} | set(holders)))
    per_test.update(_unmentioned(files, picked.run_id, per_test))
    expected = tuple(range(world_size)) if world_size else ranks
    beyond = [r for r in ranks if r not in expected]
    if beyond:
        raise ReportInputError(
            f"results for {verdict_lines.ranks(beyond)} but the world size is {world_size} "
            f"(ranks 0..{world_size - 1}); pass the right --world"
        )
    ledgers = {
        f.rank: read_ledger(ledger_path(f.path), f.run_id) for f in files if f.rank is not None
    }
    tests = [
        merge_test(
            cn,
            n,
            by_rank,
            ranks_that_ran(by_rank.values()) or expected,
            {r: found.get((cn, n)) for r, found in ledgers.items()},
        )
        for (cn, n), by_rank in per_test.items()
    ]
    absent = [r for r in expected if r not in ranks]
    if absent:
        tests.insert(0, missing_ranks_test(absent, len(expected)))
    # In place the ranks share the tests out: a rank whose share was empty holds none.
    shared = {r for by_rank in per_test.values() for r in ranks_that_ran(by_rank.values())}
    return _report(files, picked, tests, ranks, len(expected), shared)


def _report(files, picked, tests, ranks, world_size: int, shared: set[int]) -> MergedReport:
    """The merged report of one run's ``files`` (``picked`` from the folder)."""
    names = {n for f in files for n in f.suite_names if n}
    return MergedReport(
        tests=tests,
        ranks=ranks,
        world_size=world_size,
        sources=tuple(f.path for f in files),
        suite_name=names.pop() if len(names) == 1 else "rankgate-merged",
        system_out=mergedxml.prefixed((f.rank, f.system_out) for f in files),
        system_err=mergedxml.prefixed((f.rank, f.system_err) for f in files),
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


def _rank_holders(files: Sequence[JUnitFile]) -> dict[int, str]:
    """Each rank's file; ReportInputError for two files of one rank or a file whose rank
    cannot be told."""
    holders: dict[int, str] = {}
    for f in files:
        if f.rank is not None and f.rank in holders:
            raise ReportInputError(f"{holders[f.rank]} and {f.path} both hold rank {f.rank}")
        if f.rank is not None:
            holders[f.rank] = f.path
        if any(case.rank is None for case in f.cases) or (f.rank is None and not f.cases):
            raise ReportInputError(
                f"{f.path}: cannot tell its rank; name it junit.rank<r>.xml "
                "or give its testsuite a 'rank' property"
            )
    return holders


def _cases_by_test(files: Sequence[JUnitFile]) -> dict[tuple[str, str], dict[int, CaseResult]]:
    """(classname, name) -> rank -> its case; one rank's two cases of a test combined."""
    per_test: dict[tuple[str, str], dict[int, CaseResult]] = {}
    for f in files:
        for case in f.cases:
            by_rank = per_test.setdefault((case.classname, case.name), {})
            prev = by_rank.get(case.rank)
            by_rank[case.rank] = case if prev is None else prev.combine(case)
    return per_test


def _unmentioned(files: Sequence[JUnitFile], run_id: str, per_test) -> dict:
    """The tests of the run's plan (:func:`rankgate.harness.rankfiles.read_plan`) that no
    file of it mentions (their only ranks left no file): each rank's case "not run",
    saying so, so every test of the run is in the merged file once."""
    plan = next((t for f in files if (t := read_plan(plan_path(f.path), run_id))), [])
    found = {}
    for test in plan:
        key = (str(test.get("classname", "")), str(test.get("name", "")))
        ranks = [r for r in test.get("ranks") or () if isinstance(r, int)]
        if key in per_test or not ranks:
            continue
        props = ((NODE_ID_PROPERTY, str(test.get("nodeid", ""))),
                 (RANKS_PROPERTY, ",".join(map(str, ranks))))  # fmt: skip
        found[key] = {
            r: CaseResult(*key, r, "not run", NOT_RUN_PREFIX + _no_file(r, run_id),
                          properties=props, source=plan_path(files[0].path).name)
            for r in ranks
        }  # fmt: skip
    return found


def _no_file(rank: int, run_id: str) -> str:
    run = f"run {run_id}" if run_id else "this run"
    return f"rank {rank} left no JUnit or results file of {run}"


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
